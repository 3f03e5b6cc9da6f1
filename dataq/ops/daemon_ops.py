"""A daemon's ties to the people and systems that watch it: its notifier (mail, or the log), the metrics endpoint,
the Redis-outage watch, the systemic-failure watch and systemd's notify socket. The push and pop daemons each
hold one :class:`DaemonOps`, and start its loops under their own supervisor.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from dataq.config import Settings
from dataq.errors import StoreUnavailable
from dataq.logs import get_logger
from dataq.ops.exposition import MetricsServer, serve_metrics
from dataq.ops.health import replication_problems
from dataq.ops.mail import MailNotifier
from dataq.ops.metrics import DaemonMetrics, Totals
from dataq.ops.notices import LogNotifier, Notifier
from dataq.ops.watches import FailureWatch, RedisDownWatch
from dataq.runtime import systemd
from dataq.runtime.supervise import Supervisor, every
from dataq.store import QueueStore

REPLICATION_PROBE_INTERVAL = 5.0
"""Seconds between two looks at the master's replicas and the sentinels (a change is logged as a warning)."""
REDIS_PROBE_INTERVAL = 1.0
"""Seconds between two reads of the queue's state: they refresh the metrics' gauges and notice an outage (and
its end) within this."""

log = get_logger()


class DaemonOps:
    """What one daemon (``role`` ``push`` or ``pop``) of ``queue`` shows and tells; ``totals`` are its running
    totals, exported as its counters. ``notifier`` replaces mail and log (tests record notices with it)."""

    def __init__(self, settings: Settings, queue: str, role: str, totals: Totals, *,
                 notifier: Notifier | None = None) -> None:
        self.settings, self.queue, self.role = settings, queue, role
        self.metrics = DaemonMetrics(queue, role, totals)
        self.mail = MailNotifier(settings.mail, queue) if settings.mail.enabled and notifier is None else None
        self.notifier: Notifier = notifier or self.mail or LogNotifier()
        """Where every notice of the daemon goes."""
        self.redis_watch = RedisDownWatch.from_settings(self.notifier, queue, settings.mail)
        self.failure_watch = FailureWatch.from_settings(self.notifier, queue, settings.mail)
        self.metrics_url: str | None = None
        self._server: MetricsServer | None = None
        self._stopping = False
        self._closed = False

    async def start(self, store: QueueStore, supervisor: Supervisor, *, until: asyncio.Event,
                    liveness: Sequence[systemd.Liveness] = ()) -> None:
        """Serve metrics (if enabled; a port that cannot be bound is logged, never fatal) and start the loops:
        mail delivery, the Redis watch, the replication watch (with Sentinel or ``min_replicas``), and the
        watchdog pinged while every ``liveness`` check holds."""
        config = self.settings.metrics
        if config.enabled:
            self._server = await serve_metrics(self.metrics.registry, config.host, config.port_for(self.role))
            self.metrics_url = self._server.url if self._server is not None else None
        if self.mail is not None:
            supervisor.start("mail", self.mail.run, until=until)
        supervisor.start("redis-watch", lambda: self._watch_redis(store, until), until=until)
        if store.highly_available:
            supervisor.start("replication-watch", lambda: self._watch_replication(store, until), until=until)
        interval = systemd.watchdog_interval()
        if interval is not None:
            supervisor.start("watchdog", lambda: systemd.run_watchdog(interval, until, liveness), until=until)

    async def _probe(self, store: QueueStore) -> str | None:
        """Why Redis cannot be read now (None: it can); with metrics served, the read refreshes their gauges. A pop
        daemon also notes how long the next record has waited, for the console's plot of the backlog's age."""
        try:
            if self.settings.metrics.enabled:
                error = await self.metrics.refresh(store)
                if error is not None:
                    return error
            else:
                await store.ping()
            if self.role == "pop":
                await note_ages(store, time.time())
        except StoreUnavailable as exc:
            return str(exc)
        return None

    async def _watch_redis(self, store: QueueStore, until: asyncio.Event) -> None:
        down = False
        async for _ in every(REDIS_PROBE_INTERVAL, until):
            error = await self._probe(store)
            if error is not None:
                down = True
                self.redis_watch.unavailable(error)
                continue
            if down:
                down = False
                self.metrics.redis_reconnect()
                self.redis_watch.available()

    async def _watch_replication(self, store: QueueStore, until: asyncio.Event) -> None:
        """Warn when a replica is missing or behind or a sentinel stops answering, and say when it is over: the
        queue goes on meanwhile (writes that need a missing replica are refused and retried by their writers)."""
        reported: list[str] = []
        async for _ in every(REPLICATION_PROBE_INTERVAL, until):
            try:
                status = await store.replication_status()
            except StoreUnavailable:
                continue  # the Redis watch reports an outage
            problems = replication_problems(status)
            self.metrics.replication(status.online, len(problems))
            if problems and problems != reported:
                log.warning("replication degraded", problems=problems, master=status.master)
            elif reported and not problems:
                log.info("replication healthy again", master=status.master, replicas=status.online)
            reported = problems

    async def ready(self, status: str) -> None:
        await systemd.ready(status)

    async def stopping(self) -> None:
        """Tell systemd the daemon is shutting down, once: from then on it expects no watchdog pings (a drain may
        take its grace period and more), only the exit within ``TimeoutStopSec=``."""
        if not self._stopping:
            self._stopping = True
            await systemd.stopping()

    async def close(self) -> None:
        """Tell systemd, stop serving metrics, and send the mail still pending (within the mail timeout); once."""
        if self._closed:
            return
        self._closed = True
        await self.stopping()
        if self._server is not None:
            await asyncio.to_thread(self._server.close)
            self._server = None
        if self.mail is not None:
            await self.mail.close()


async def note_ages(store: QueueStore, now: float) -> None:
    """How long the next record to run has waited, in the queue's ring and each activity's (0 where none waits):
    what the console plots as the backlog's age."""
    queued = await store.oldest_queued()
    await store.note_backlog_age(now - min(queued.values()) if queued else 0.0)
    if not store.plan.single:
        for activity in store.plan.names_in_lists:
            await store.note_backlog_age(now - queued[activity] if activity in queued else 0.0, activity)
