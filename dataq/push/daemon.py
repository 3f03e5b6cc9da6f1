"""The push daemon: feeders send record lines over TCP, the daemon acknowledges each once Redis holds it.

Its life, top to bottom (:meth:`PushDaemon.run`): listen; read the ``read`` flag and follow it (pub/sub notices
for immediacy, a poll as safety net); commit records in groups (:mod:`dataq.push.committer`) and answer each
line (:mod:`dataq.push.listener`); heartbeat into the worker registry; on SIGTERM/SIGINT stop accepting, answer
what was read, close. When the active queue grows past ``max_queue_size``, or Redis's memory past
``push.max_memory`` (watched every :data:`~dataq.push.cutoff.MEMORY_CHECK_INTERVAL`), the daemon turns ``read`` off
itself and back on once both are low again (:mod:`dataq.push.cutoff`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import cast

from dataq.actions.chain_link import chain_link
from dataq.audit.questions import AuditDesk
from dataq.audit.relay import Relay
from dataq.config import PushSettings, QueueSettings, Settings
from dataq.custody.desk import ReceiptDesk
from dataq.embedded.locate import resolve_redis
from dataq.errors import ConfigError, DataqError, StoreError
from dataq.logs import get_logger
from dataq.ops.daemon_ops import DaemonOps
from dataq.ops.notices import Notifier
from dataq.push.committer import PIPELINE_DEPTH, REPLICATED_PIPELINE_DEPTH, Committer
from dataq.push.cutoff import AUTO_WHO, MEMORY_CHECK_INTERVAL, ReadCutoff
from dataq.push.gate import Gate
from dataq.push.listener import Listener
from dataq.push.read_flag import ReadFlag
from dataq.runtime.identity import make_worker_id
from dataq.runtime.signals import install_stop_signals
from dataq.runtime.supervise import EXIT_FAILED, Supervisor, every
from dataq.runtime.systemd import STALL_AFTER
from dataq.store import Flag, QueueStore

EXIT_OK = 0
DRAIN_TIMEOUT = 10.0
"""Seconds shutdown waits for lines already read to be stored and answered (longer only if Redis is down,
and then the unanswered records are sent again by their feeders)."""
CLOSE_TIMEOUT = 2.0
"""Seconds shutdown waits for connections to flush their last replies before aborting them."""
REAP_INTERVAL_MAX = 1.0
"""Longest pause between two sweeps for idle connections."""
TLS_HANDSHAKE_TIMEOUT = 30.0
"""Seconds a feeder has to complete the TLS handshake (less if ``idle_timeout`` is shorter)."""

log = get_logger()


def server_tls_context(push: PushSettings) -> ssl.SSLContext | None:
    """The listener's TLS context (None without ``tls_cert``); with ``tls_ca``, clients must show a certificate."""
    if push.tls_cert is None or push.tls_key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(push.tls_cert, push.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"push.tls_cert, push.tls_key: cannot load {push.tls_cert} with {push.tls_key}: {exc}") \
            from exc
    if push.tls_ca is not None:
        try:
            context.load_verify_locations(cafile=push.tls_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"push.tls_ca: cannot load {push.tls_ca}: {exc}") from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class PushDaemon:
    """One queue's push daemon; build it with a store, then ``await run()``."""

    def __init__(self, settings: Settings, queue: QueueSettings, store: QueueStore, stop: asyncio.Event, *,
                 notifier: Notifier | None = None, memory_interval: float = MEMORY_CHECK_INTERVAL) -> None:
        self.settings, self.queue, self.store, self.stop = settings, queue, store, stop
        self.memory_interval = memory_interval
        push = settings.push
        self.worker_id = make_worker_id("push")
        self.tls = server_tls_context(push)
        self.gate = Gate()
        # A queue that hands records on with custody answers done only once its next site has: the action's raw
        # options say so (the pop daemon checks them; this daemon only reads them).
        move = queue.action_options.get("network_move", {})
        next_sites = move.get("next_sites", ()) if move.get("custody", True) is not False else ()
        desk = ReceiptDesk(settings.site, queue.max_errors, tuple(str(site) for site in next_sites))
        # Audit questions are answered with this site's own next sites, custody or not, and its stored copies.
        stored_under = queue.action_options.get("disk_store", {}).get("root") or \
            queue.action_options.get("archive_ingest", {}).get("archive_root")
        link = chain_link(settings, queue)
        audit_desk = AuditDesk(settings.site, queue.max_errors, link.next_sites,
                               str(stored_under) if stored_under else None, settings.data_dir)
        self.committer = Committer(store, self.gate, batch_max=push.batch_max, after_batch=self._after_batch,
                                   depth=REPLICATED_PIPELINE_DEPTH if store.replication.enabled else PIPELINE_DEPTH,
                                   desk=desk, audit_desk=audit_desk)
        self.listener = Listener(
            self.committer,
            self.gate,
            rules=queue.rules,
            max_line_bytes=push.max_line_bytes,
            max_connections=push.max_connections,
            batch_max=push.batch_max,
            idle_timeout=push.idle_timeout,
            tls=self.tls is not None,
            relay=Relay(store, audit_desk, link.asker if link.next_sites else None),
        )
        self.ops = DaemonOps(settings, queue.name, "push", self._totals, notifier=notifier)
        self.supervisor = Supervisor(stop)
        self.read = ReadFlag(self.gate, self._read_flag, self._write_flag)
        self.cutoff = ReadCutoff(store, queue, push, self.ops.notifier, self.read)
        self._started = time.time()
        self._listen = ""

    def _totals(self) -> Mapping[str, int]:
        stats = self.committer.stats
        return {"pushed": stats.pushed, "duplicate": stats.ignored, "input_error": stats.errors}

    async def run(self, ready: Callable[[tuple[str, int]], None] | None = None) -> int:
        """Serve until the stop event; returns the exit status (non-zero when a part failed of a bug)."""
        push = self.settings.push
        port = self.settings.push_port_for(self.queue.name)
        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(
                self.listener.protocol_factory, push.host, port, ssl=self.tls, reuse_address=True,
                ssl_handshake_timeout=min(TLS_HANDSHAKE_TIMEOUT, push.idle_timeout) if self.tls else None,
            )
        except OSError as exc:
            raise DataqError(f"cannot listen on {push.host}:{port}: {exc.strerror or exc}") from exc
        host, bound_port = server.sockets[0].getsockname()[:2]
        self._listen = f"{host}:{bound_port}"
        supervisor = self.supervisor
        try:
            await self.ops.start(self.store, supervisor, until=self.stop,
                                 liveness=[lambda: self.committer.pulse.alive(STALL_AFTER)])
            committing = supervisor.start("push-committer", self.committer.run)
            supervisor.start("push-flags", self._follow_flags)
            supervisor.start("push-heartbeat", self._housekeeping)
            supervisor.start("push-reaper", self._reap_idle)
            if push.max_memory is not None:
                supervisor.start("push-memory", self._watch_memory)
            log.info("push daemon listening", queue=self.queue.name, listen=self._listen, tls=self.tls is not None,
                     mutual_tls=self.settings.push.tls_ca is not None, worker=self.worker_id)
            await self.ops.ready(f"listening on {self._listen} for queue {self.queue.name}")
            if ready is not None:
                ready((host, bound_port))
            await self.stop.wait()
            await self.ops.stopping()
            # 1. No new feeders: the listening socket goes first.
            server.close()
            # 2. Stop reading, and let every line already read be stored and answered (unless the committer died:
            #    then nothing more will be, and the feeders send the unanswered lines again).
            self.listener.begin_shutdown()
            if committing.done() or not await self.committer.drain(DRAIN_TIMEOUT):
                log.warning("shutting down with records unanswered; their feeders will send them again",
                            backlog=self.committer.backlog)
            # 3. Close connections once their last replies are flushed, send the last notices, then end the
            #    background loops.
            await self.listener.close_all(CLOSE_TIMEOUT)
        finally:
            # Reached at once after a failure on the way: whatever is still open goes now.
            server.close()
            self.listener.begin_shutdown()
            await self.listener.close_all(0)
            await self.ops.close()
            await supervisor.cancel()
            with contextlib.suppress(StoreError):
                await self.store.unregister(self.worker_id)
            stats = self.committer.stats
            log.info("push daemon stopped", pushed=stats.pushed, ignored=stats.ignored, errors=stats.errors)
        return EXIT_OK if supervisor.failed is None else EXIT_FAILED

    # --- the read flag ---------------------------------------------------------------------------------------

    async def _read_flag(self) -> bool:
        return (await self.store.flags())[Flag.READ]

    async def _write_flag(self, on: bool) -> None:
        await self.store.set_flag(Flag.READ, on, who=AUTO_WHO)

    async def _follow_flags(self) -> None:
        """Notices switch ``read`` at once; on every (re)subscription the flags are read again, since notices
        sent while the connection was down are lost."""
        # An async generator (typed as an iterator): closed here, so its pub/sub connection goes at once.
        notices = cast(AsyncGenerator[str, None], self.store.notices(work=False))
        try:
            await self.read.refresh("start")
            async for notice in notices:
                if notice.startswith("flag:read:"):
                    self.read.operator_switch(notice.endswith(":on"))
        finally:
            await notices.aclose()

    async def _after_batch(self, active_length: int) -> None:
        await self.cutoff.queue_length(active_length)

    # --- background loops ---------------------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        push = self.settings.push
        info: dict[str, object] = {
            "role": "push", "host": socket.gethostname(), "pid": os.getpid(), "queue": self.queue.name,
            "listen": self._listen, "started": self._started, "metrics": self.ops.metrics_url,
        }
        async for _ in every(push.heartbeat_interval, self.stop):
            stats = self.committer.stats
            await self.store.heartbeat(self.worker_id, info, {
                "pushed": stats.pushed, "ignored": stats.ignored, "errors": stats.errors,
                "connections": len(self.listener.connections), "accepted": self.listener.accepted,
                "refused": self.listener.refused, "reading": self.gate.open, "blocked_by": self.gate.blocked_by,
            }, ttl=push.heartbeat_ttl)
            await self.read.refresh("poll")
            await self.cutoff.check()

    async def _watch_memory(self) -> None:
        # A loop of its own: a Redis that refuses INFO (a managed one may) must not stop the heartbeats.
        async for _ in every(self.memory_interval, self.stop):
            await self.cutoff.memory()

    async def _reap_idle(self) -> None:
        interval = min(REAP_INTERVAL_MAX, self.settings.push.idle_timeout / 2)
        loop = asyncio.get_running_loop()
        async for _ in every(interval, self.stop):
            self.listener.reap_idle(loop.time())


async def run_push_daemon(
    settings: Settings,
    queue: str,
    *,
    stop: asyncio.Event | None = None,
    ready: Callable[[tuple[str, int]], None] | None = None,
    notifier: Notifier | None = None,
) -> int:
    """Run the push daemon of ``queue`` until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is None).

    ``ready`` gets the bound (host, port) once the daemon serves. Returns the exit status.
    """
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    queue_settings = settings.queue(queue)
    handle = resolve_redis(settings)
    store = QueueStore.open(settings, handle.url, queue_settings.name)
    try:
        return await PushDaemon(settings, queue_settings, store, stop, notifier=notifier).run(ready)
    finally:
        await store.close()


__all__ = ["PushDaemon", "run_push_daemon", "server_tls_context"]
