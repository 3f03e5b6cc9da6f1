"""The pop daemon: claim records crash-safely and run the queue's actions on them (``dataq pop``).

Its life, top to bottom (:meth:`PopDaemon.run`): build the actions (configuration errors stop it here), start
them, register with a first heartbeat, then claim and run records while the heartbeat, the sweeper, the
notice listener, the settler and the notice outbox run beside it. On stop: no more claims, running actions get
the grace period, then are cancelled; finished records are settled, the rest go back to the next-to-run end,
and the worker leaves the registry. A ``kill -9`` at any point loses nothing: the records it held stay in its
processing list until a sweeper (of any pop daemon) sees its heartbeat expire and returns them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from dataq.actions import Action, load_actions
from dataq.daemon_ops import DaemonOps
from dataq.errors import StoreUnavailable
from dataq.logs import get_logger
from dataq.notices import LogNotifier, Notifier, Outbox
from dataq.record import Record
from dataq.service import (
    Backoff,
    cancel_and_wait,
    every,
    install_stop_signals,
    make_worker_id,
    open_store,
    resolve_redis,
    supervise,
)
from dataq.settings import QueueSettings, Settings
from dataq.store import QueueStore
from dataq.sweeper import Sweeper
from dataq.worker import WAKING_NOTICES, PopWorker

EXIT_OK = 0
EXIT_UNSETTLED = 1
"""Shutdown could not reach Redis: some results are unsettled (their records will run again, none is lost)."""
SHUTDOWN_REDIS_WAIT = 30.0
"""Seconds shutdown keeps retrying Redis (to settle results and give records back) before it leaves that to
the sweepers of other daemons."""
NOTICE_FLUSH_WAIT = 10.0
"""Seconds shutdown waits for posted notices to be delivered."""
ROLE = "pop"

log = get_logger()


async def run_pop_daemon(
    settings: Settings,
    queue: str,
    *,
    concurrency: int | None = None,
    stop: asyncio.Event | None = None,
    ready: Callable[[str], None] | None = None,
    notifier: Notifier | None = None,
) -> int:
    """Run a pop daemon on ``queue`` until ``stop`` is set (SIGTERM/SIGINT when None); returns the exit status.

    ``ready`` gets the worker id once the worker is registered. Raises ConfigError for unknown actions or options
    before anything starts.
    """
    queue_settings = settings.queue(queue)
    actions = load_actions(queue_settings, settings)
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    handle = resolve_redis(settings)
    try:
        store = open_store(settings, handle.url, queue)
        ops = DaemonOps(settings, queue, ROLE)
        try:
            daemon = PopDaemon(settings, queue_settings, store, actions, concurrency=concurrency,
                               notifier=notifier or ops.notifier, ops=ops)
            return await daemon.run(stop, ready)
        finally:
            await store.close()
    finally:
        handle.close()


class PopDaemon:
    def __init__(
        self,
        settings: Settings,
        queue: QueueSettings,
        store: QueueStore,
        actions: Sequence[Action[Any]],
        *,
        concurrency: int | None = None,
        notifier: Notifier | None = None,
        ops: DaemonOps | None = None,
    ) -> None:
        self.settings = settings
        self.ops = ops
        self.pop = settings.pop
        self.store = store
        self.actions = tuple(actions)
        self.worker_id = make_worker_id(ROLE)
        self.outbox = Outbox(notifier or LogNotifier())
        self.worker = PopWorker(
            store,
            self.worker_id,
            queue,
            self.actions,
            concurrency or self.pop.concurrency,
            self.outbox,
            self._beat,
        )
        self.sweeper = Sweeper(store, self.pop, settings.events, self.outbox, own_worker=self.worker_id)
        self.info: dict[str, object] = {
            "role": ROLE,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queue": queue.name,
            "started": time.time(),
            "concurrency": self.worker.concurrency,
            "actions": list(queue.actions),
        }
        if ops is not None:
            self._observe(ops)
        self._registered = False
        self._halt = asyncio.Event()
        """Ends the background loops, once the records are given back."""

    async def run(self, stop: asyncio.Event, ready: Callable[[str], None] | None = None) -> int:
        """Start, serve until ``stop``, shut down in phases; returns the exit status."""
        background: list[asyncio.Task[None]] = []
        started: list[Action[Any]] = []
        try:
            for action in self.actions:
                await action.start()
                started.append(action)
            if self.ops is not None:
                await self.ops.start(self.store, self._halt)
                self.info["metrics"] = self.ops.metrics_url
            if not await self._until_done(self._beat, stop):
                return EXIT_OK  # stopped before Redis ever answered: nothing claimed, nothing to give back
            log.info("pop daemon started", worker=self.worker_id, queue=self.store.queue,
                     concurrency=self.worker.concurrency, actions=self.info["actions"])
            if ready is not None:
                ready(self.worker_id)
            if self.ops is not None:
                self.ops.ready(f"worker {self.worker_id} serving queue {self.store.queue}")
            loops: dict[str, Callable[[], Awaitable[None]]] = {
                "heartbeat": self._heartbeat_loop,
                "sweeper": self._sweep_loop,
                "notices": self._listen,
                "settle": self.worker.settler.run,
                "outbox": self.outbox.deliver,
            }
            background = [
                asyncio.create_task(supervise(name, body, self._halt), name=name) for name, body in loops.items()
            ]
            claiming = asyncio.create_task(supervise("claim", self.worker.claim_loop, stop), name="claim")
            background.append(claiming)
            await stop.wait()
            return await self._shut_down(claiming, background)
        finally:
            # Normally all done by _shut_down; after an unexpected error, whatever still runs is cancelled here
            # (its records stay in the processing list for a sweeper to return).
            self._halt.set()
            await cancel_and_wait(background)
            if self.worker.running:
                await self.worker.finish(0)
            for action in reversed(started):
                try:
                    await action.close()
                except Exception:
                    log.exception("closing an action failed", action=action.name)
            if self.ops is not None:
                await self.ops.close()

    def _observe(self, ops: DaemonOps) -> None:
        """Feed the metrics and the systemic-failure watch from the worker, without touching its hot path."""
        settler = self.worker.settler
        ops.mirror_totals(lambda: {"done": settler.acknowledged, "failed": settler.failures,
                                   "deactivated": settler.deactivated})
        self.worker.observe_action = ops.metrics.action_duration

        def claimed(record: Record) -> None:
            if record.pushed_at is not None:
                ops.metrics.claim_latency(time.time() - record.pushed_at)

        self.worker.observe_claim = claimed
        settler.on_failure = lambda record_id, message: ops.post(ops.failure_watch.record(record_id, message))

    async def _shut_down(self, claiming: asyncio.Task[None], background: list[asyncio.Task[None]]) -> int:
        log.info("pop daemon stopping", worker=self.worker_id, running=self.worker.running)
        # 1. No new record: whatever is claimed from here on would only have to be given back.
        self.worker.stop_claiming()
        await claiming
        # 2. Running actions may finish within the grace period; the rest are cancelled (released below).
        cancelled = await self.worker.finish(self.pop.grace_period)
        # 3. Settle finished records before releasing, or release would queue again records that are done.
        deadline = time.monotonic() + SHUTDOWN_REDIS_WAIT
        settled = await self._within(self.worker.settler.settled(), deadline)
        # 4. Give back what is still held (cancelled records) to the next-to-run end; leave the registry. The
        #    heartbeat beats until here, so no sweeper takes the records meanwhile.
        released = settled and await self._until_done(self._release, None, deadline)
        self._halt.set()
        await cancel_and_wait(background)
        if released:
            await self._until_done(lambda: self.store.unregister(self.worker_id), None, deadline)
        await self.outbox.flush(NOTICE_FLUSH_WAIT)
        if not released:
            log.error("redis unavailable at shutdown: records left in this worker's processing list, for a sweeper "
                      "to return once the heartbeat expires", worker=self.worker_id,
                      unsettled=self.worker.settler.pending)
            return EXIT_UNSETTLED
        log.info("pop daemon stopped", worker=self.worker_id, cancelled=cancelled, **self.worker.stats())
        return EXIT_OK

    async def _release(self) -> None:
        result = await self.store.release(self.worker_id)
        if result.returned:
            log.info("records given back to the queue", count=result.returned)

    async def _beat(self) -> None:
        """Refresh the heartbeat (registering when not registered)."""
        unregistered = await self.store.heartbeat(self.worker_id, self.info, self.worker.stats(),
                                                  self.pop.heartbeat_ttl)
        if unregistered and self._registered:
            log.warning("this worker had been given up for dead (heartbeat lapsed): its records went back to the "
                        "queue, and results for them will be dropped", worker=self.worker_id)
        self._registered = True

    async def _heartbeat_loop(self) -> None:
        # Failures are retried at the next interval, not after the supervisor's growing backoff: a lapse longer
        # than the TTL would have every sweeper take our records back.
        outage = False
        async for _ in every(self.pop.heartbeat_interval, self._halt):
            try:
                await self._beat()
            except StoreUnavailable as exc:
                if not outage:
                    log.warning("redis unavailable; heartbeat missed", error=str(exc))
                outage = True
            else:
                if outage:
                    log.info("heartbeat restored")
                outage = False

    async def _sweep_loop(self) -> None:
        async for _ in every(self.pop.sweep_interval, self._halt):
            # Beat first: after a Redis outage longer than the TTL, our own heartbeat may have expired, and we
            # must not look dead to the sweep that follows (ours skips us anyway; this also covers the others').
            await self._beat()
            await self.sweeper.sweep()

    async def _listen(self) -> None:
        # Notices sent while we were not subscribed are lost: look once now.
        self.worker.wake()
        async for notice in self.store.notices():
            if notice in WAKING_NOTICES:
                self.worker.wake()

    @staticmethod
    async def _within(awaitable: Awaitable[None], deadline: float) -> bool:
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await awaitable
        except TimeoutError:
            return False
        return True

    @staticmethod
    async def _until_done(call: Callable[[], Awaitable[None]], stop: asyncio.Event | None,
                          deadline: float | None = None) -> bool:
        """Call until it succeeds (True), retrying while Redis is unavailable, until ``stop`` or ``deadline``."""
        backoff = Backoff()
        while True:
            try:
                await call()
                return True
            except StoreUnavailable as exc:
                log.warning("redis unavailable; retrying", error=str(exc))
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await backoff.wait(stop)
            if stop is not None and stop.is_set():
                return False
