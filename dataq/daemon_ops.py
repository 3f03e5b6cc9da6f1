"""A daemon's ties to the people and systems that watch it: the metrics endpoint, e-mail notices, systemd's
notify socket, and the Redis-outage watch. The push and pop daemons each hold one :class:`DaemonOps`.

Counters are mirrored from the daemon's own totals when Prometheus scrapes, so the hot paths (group commit,
settling) carry no metrics code at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

from dataq import sdnotify
from dataq.errors import DataqError, StoreUnavailable
from dataq.logs import get_logger
from dataq.metrics import DaemonMetrics, MetricsServer
from dataq.notices import LogNotifier, Notifier
from dataq.notify import FailureWatch, MailNotifier, RedisDownWatch
from dataq.notify.kinds import Notice
from dataq.service import every
from dataq.settings import Settings
from dataq.store import QueueStore

REDIS_PROBE_INTERVAL = 1.0
"""Seconds between the outage watch's pings: an outage is noticed (and its end reported) within this."""

log = get_logger()


class DaemonOps:
    def __init__(self, settings: Settings, queue: str, role: str) -> None:
        self.settings, self.queue, self.role = settings, queue, role
        self.metrics = DaemonMetrics(queue, role)
        self.mail: MailNotifier | None = MailNotifier(settings.mail, queue) if settings.mail.enabled else None
        self.notifier: Notifier = self.mail if self.mail is not None else LogNotifier()
        self.redis_watch = RedisDownWatch.from_settings(self.notifier, queue, settings.mail)
        self.failure_watch = FailureWatch.from_settings(self.notifier, queue, settings.mail)
        self.metrics_url: str | None = None
        self._server: MetricsServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._totals: list[Callable[[], Mapping[str, int]]] = []

    def mirror_totals(self, totals: Callable[[], Mapping[str, int]]) -> None:
        """At each scrape, export the daemon's running totals (``pushed``, ``done``, ...) as its counters."""
        self._totals.append(totals)

    async def start(self, store: QueueStore, stop: asyncio.Event) -> None:
        """Serve metrics (if enabled), start mail delivery and the outage watch. Never fails the daemon."""
        if self.mail is not None:
            self.mail.start()
        self.metrics.watch(store)

        async def mirror() -> None:
            for totals in self._totals:
                self.metrics.mirror_totals(totals())

        self.metrics.registry.add_collector(mirror)
        config = self.settings.metrics
        if config.enabled:
            self._server = await self._serve_metrics(config.host, config.port_for(self.role))
        self._tasks = [
            asyncio.create_task(self._watch_redis(store, stop), name="redis-watch"),
            asyncio.create_task(sdnotify.run_watchdog(stop), name="watchdog"),
        ]

    async def _serve_metrics(self, host: str, port: int) -> MetricsServer | None:
        for candidate in dict.fromkeys((port, 0)):
            server = MetricsServer(self.metrics.registry, host, candidate)
            try:
                bound = await server.start()
            except DataqError as exc:
                # Two daemons of one role on a host cannot share the port; the second takes a free one and
                # says where (the worker registry shows it too).
                log.warning("metrics port unavailable", port=candidate, error=str(exc))
                continue
            self.metrics_url = f"http://{server.url_host}:{bound}/metrics"
            log.info("metrics served", url=self.metrics_url)
            return server
        return None

    async def _watch_redis(self, store: QueueStore, stop: asyncio.Event) -> None:
        down = False
        async for _ in every(REDIS_PROBE_INTERVAL, stop):
            try:
                await store.ping()
            except StoreUnavailable as exc:
                down = True
                await self.redis_watch.unavailable(str(exc))
                continue
            if down:
                down = False
                self.metrics.redis_reconnect()
                await self.redis_watch.available()

    def post(self, notice: Notice | None) -> None:
        """Send a notice without waiting (delivery, digesting and retries happen in the background)."""
        if notice is not None:
            task = asyncio.create_task(self.notifier.notify(*notice))
            self._tasks.append(task)
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)

    def ready(self, status: str) -> None:
        sdnotify.ready(status)

    async def close(self) -> None:
        sdnotify.stopping()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.close()
        if self.mail is not None:
            await self.mail.close()
