"""The pop daemon: claim records crash-safely and run the queue's actions on them (``dataq pop``).

Its life, top to bottom (:meth:`PopDaemon.run`): build the actions (configuration errors stop it here), start
them, register with a first heartbeat, then claim and run records while the heartbeat, the sweeper, the
notice listener, the outcome writer and the daemon's ties to its operators (:mod:`dataq.ops.daemon_ops`) run
beside it, all supervised (a bug in one stops the daemon with a non-zero status). On stop: no more claims, running
actions get the grace period, then are cancelled; the outcomes of finished records are written, the rest go back
to the next-to-run end, and the worker leaves the registry. A ``kill -9`` at any point loses nothing: the records it
held stay in its processing list until a sweeper (of any pop daemon) sees its heartbeat expire and returns them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from dataq.actions import Action, ActionContext, load_actions
from dataq.config import QueueSettings, Settings
from dataq.embedded.locate import resolve_redis
from dataq.errors import StoreUnavailable
from dataq.logs import get_logger
from dataq.ops.daemon_ops import DaemonOps
from dataq.ops.notices import Notifier, reachable_notice, unreachable_notice
from dataq.pop.breaker import Breakers, Outage
from dataq.pop.reload import apply_reload, reloaded_options
from dataq.pop.sweeper import Sweeper
from dataq.pop.worker import WAKING_NOTICES, PopWorker
from dataq.record import Record
from dataq.runtime.backoff import Backoff
from dataq.runtime.identity import make_worker_id
from dataq.runtime.signals import install_stop_signals
from dataq.runtime.supervise import EXIT_FAILED, Supervisor, every
from dataq.store import QueueStore

EXIT_OK = 0
EXIT_UNWRITTEN = 1
"""Shutdown could not reach Redis: some outcomes are unwritten (their records will run again, none is lost)."""
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

    ``ready`` gets the worker id once the worker is registered; ``notifier`` replaces mail and log. Raises
    ConfigError for unknown actions or options before anything starts.
    """
    reload = None
    if stop is None:
        # First of all: a SIGHUP (systemctl reload) before its handler would end the daemon, and systemd counts
        # an end by SIGHUP as clean, so it would not start it again.
        stop, reload = asyncio.Event(), asyncio.Event()
        install_stop_signals(stop, reload=reload)
    queue_settings = settings.queue(queue)
    handle = resolve_redis(settings)
    store = QueueStore.open(settings, handle.url, queue)
    try:
        # Built before the actions, which post their notices (overdue receipts) to its notifier.
        ops = DaemonOps(settings, queue_settings.name, ROLE, dict, notifier=notifier)
        context = ActionContext(queue_settings, concurrency or settings.pop.concurrency, store, custody=store,
                                site=settings.site, notifier=ops.notifier)
        actions = load_actions(context, settings.source)
        daemon = PopDaemon(settings, queue_settings, store, actions, concurrency=concurrency, ops=ops, reload=reload)
        return await daemon.run(stop, ready)
    finally:
        await store.close()


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
        reload: asyncio.Event | None = None,
    ) -> None:
        """``reload``: set (by SIGHUP) to take the actions' windows and bandwidth again from the settings file."""
        self.settings = settings
        self._reload = reload
        self.pop = settings.pop
        self.store = store
        self.actions = tuple(actions)
        self.worker_id = make_worker_id(ROLE)
        self.ops = ops or DaemonOps(settings, queue.name, ROLE, self._totals, notifier=notifier)
        self.ops.metrics.totals = self._totals
        self.queue_name = queue.name
        breakers = Breakers(self.pop.unreachable_after, self.pop.probe_delay, self.pop.probe_max_delay,
                            on_open=self._outage_started, on_close=self._outage_ended)
        self._configured = concurrency or self.pop.concurrency
        self._no_destination: set[str] = set()
        """Actions whose ``destination`` raised (logged once each)."""
        self.worker = PopWorker(
            store,
            self.worker_id,
            queue,
            self.actions,
            self._configured,
            self.ops.notifier,
            self._beat,
            observe_action=self._action_ran,
            observe_claim=self._claimed,
            on_failure=self.ops.failure_watch.failed,
            breakers=breakers,
        )
        self.sweeper = Sweeper(store, self.pop, settings.events, self.ops.notifier, own_worker=self.worker_id)
        self.info: dict[str, object] = {
            "role": ROLE,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queue": queue.name,
            "started": time.time(),
            "concurrency": self.worker.concurrency,
            "actions": list(queue.actions),
        }
        self._registered = False
        self._halt = asyncio.Event()
        """Ends the background loops, once the records are given back."""

    async def _reload_loop(self) -> None:
        """Take the actions' reloadable settings again each time :attr:`_reload` is set (SIGHUP)."""
        assert self._reload is not None
        while True:
            await self._reload.wait()
            self._reload.clear()
            # The file is read off the loop; the actions change on it, between two of their reads.
            changes = await asyncio.to_thread(reloaded_options, self.settings.source, self.queue_name, self.actions)
            if changes is not None:
                apply_reload(changes)
                self.worker.wake()  # a window may have opened or closed

    def _totals(self) -> Mapping[str, int]:
        outcomes = self.worker.outcomes
        return {"done": outcomes.acknowledged, "failed": outcomes.failures, "deactivated": outcomes.deactivated,
                "waited": outcomes.postponements}

    def _outage_started(self, outage: Outage) -> None:
        log.warning("destination unreachable: claiming paused, one record at a time probes it",
                    destination=outage.destination, error=outage.error)
        self.ops.metrics.destination_unreachable(outage.destination, True)
        self.ops.notifier.post(unreachable_notice(self.queue_name, self.worker_id, outage.destination, outage.error))

    def _outage_ended(self, outage: Outage) -> None:
        down_for = time.time() - outage.since
        log.info("destination reachable again: claiming resumes", destination=outage.destination,
                 down_for=round(down_for, 1), probes=outage.probes)
        self.ops.metrics.destination_unreachable(outage.destination, False)
        self.ops.notifier.post(reachable_notice(self.queue_name, self.worker_id, outage.destination, down_for))

    def _action_ran(self, action: Action[Any], record: Record, seconds: float, succeeded: bool) -> None:
        metrics = self.ops.metrics
        metrics.action_duration(action.name, seconds)
        if succeeded:
            try:
                destination = action.destination(record) or action.name
            except Exception as exc:  # a plugin's bug must not turn the action's success into a failure
                if action.name not in self._no_destination:  # once, not once a record
                    self._no_destination.add(action.name)
                    log.warning("the action could not say its destination; its bytes are counted under its name",
                                action=action.name, error=str(exc))
                destination = action.name
            metrics.action_bytes(action.name, destination, record.size)

    def _claimed(self, record: Record) -> None:
        if record.pushed_at is not None:
            self.ops.metrics.claim_latency(time.time() - record.pushed_at)

    async def run(self, stop: asyncio.Event, ready: Callable[[str], None] | None = None) -> int:
        """Start, serve until ``stop``, shut down in phases; returns the exit status."""
        supervisor = Supervisor(stop)
        started: list[Action[Any]] = []
        try:
            for action in self.actions:
                await action.start()
                started.append(action)
            await self.ops.start(self.store, supervisor, until=self._halt, liveness=[self.worker.responsive])
            self.info["metrics"] = self.ops.metrics_url
            if not await self._until_done(self._beat, stop):
                return EXIT_OK  # stopped before Redis ever answered: nothing claimed, nothing to give back
            log.info("pop daemon started", worker=self.worker_id, queue=self.store.queue,
                     concurrency=self.worker.concurrency, actions=self.info["actions"])
            if self.worker.concurrency > self._configured:
                log.info("concurrency raised so that the actions' batches fill", configured=self._configured,
                         concurrency=self.worker.concurrency)
            if ready is not None:
                ready(self.worker_id)
            await self.ops.ready(f"worker {self.worker_id} serving queue {self.store.queue}")
            loops: dict[str, Callable[[], Awaitable[None]]] = {
                "heartbeat": self._heartbeat_loop,
                "sweeper": self._sweep_loop,
                "notices": self._listen,
            }
            if self._reload is not None:
                loops["reload"] = self._reload_loop
            for name, body in loops.items():
                supervisor.start(name, body, until=self._halt)
            writing = supervisor.start("outcomes", self.worker.outcomes.run, until=self._halt)
            claiming = supervisor.start("claim", self.worker.claim_loop)
            await stop.wait()
            status = await self._shut_down(claiming, writing, supervisor)
            return status if supervisor.failed is None else EXIT_FAILED
        finally:
            # Normally all done by _shut_down; after an unexpected error, whatever still runs is cancelled here
            # (its records stay in the processing list for a sweeper to return).
            self._halt.set()
            await self.ops.close()
            await supervisor.cancel()
            if self.worker.running:
                await self.worker.finish(0)
            for action in reversed(started):
                try:
                    await action.close()
                except Exception:
                    log.exception("closing an action failed", action=action.name)

    async def _shut_down(self, claiming: asyncio.Task[None], writing: asyncio.Task[None],
                         supervisor: Supervisor) -> int:
        log.info("pop daemon stopping", worker=self.worker_id, running=self.worker.running)
        await self.ops.stopping()
        # 1. No new record: whatever is claimed from here on would only have to be given back.
        self.worker.stop_claiming()
        await claiming
        # 2. Running actions may finish within the grace period; the rest are cancelled (released below).
        cancelled = await self.worker.finish(self.pop.grace_period)
        # 3. Write the outcomes of finished records before releasing, or release would queue again records that are
        #    done. A writer that died of a bug writes nothing more: its records go back with the rest, to run again.
        deadline = time.monotonic() + self.pop.shutdown_redis_wait
        written = await self._within(self._written_or_gone(writing), deadline)
        # 4. Give back what is still held (cancelled records) to the next-to-run end; leave the registry. The
        #    heartbeat beats until here, so no sweeper takes the records meanwhile.
        released = written and await self._until_done(self._release, None, deadline)
        # 5. The last notices go out; then the background loops end.
        self._halt.set()
        await self.ops.close()
        await supervisor.cancel()
        if released:
            await self._until_done(lambda: self.store.unregister(self.worker_id), None, deadline)
        if not released:
            log.error("redis unavailable at shutdown: records left in this worker's processing list, for a sweeper "
                      "to return once the heartbeat expires", worker=self.worker_id,
                      unwritten=self.worker.outcomes.pending)
            return EXIT_UNWRITTEN
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

    async def _written_or_gone(self, writing: asyncio.Task[None]) -> None:
        waiting = asyncio.ensure_future(self.worker.outcomes.written())
        try:
            await asyncio.wait({waiting, writing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()

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
