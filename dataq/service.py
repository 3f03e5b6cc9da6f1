"""What every dataq daemon shares: where Redis is, stop signals, backoff, heartbeats, supervised loops."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import secrets
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from dataq.errors import StoreUnavailable
from dataq.logs import get_logger
from dataq.redis_server import EmbeddedRedis, find_running
from dataq.settings import Settings
from dataq.store import QueueStore

BACKOFF_INITIAL = 0.05
"""First wait after a failure, in seconds: short, since most Redis hiccups are restarts."""
BACKOFF_CAP = 5.0
"""Longest wait between retries: an operator fixing Redis should not wait long for dataq to notice."""
FORCED_EXIT_STATUS = 130
CANCEL_ATTEMPTS = 3
"""Times a background task is cancelled before it is given up on (redis-py can swallow one cancel)."""
CANCEL_WAIT = 0.5
"""Seconds to wait for background tasks after each cancel."""

log = get_logger()


class Backoff:
    """Capped exponential backoff with full jitter (so a fleet does not retry in lock-step)."""

    def __init__(self, initial: float = BACKOFF_INITIAL, cap: float = BACKOFF_CAP) -> None:
        self.initial, self.cap = initial, cap
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.initial * 2**self.attempt)
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    async def wait(self, stop: asyncio.Event | None = None) -> None:
        """Sleep the next delay, or less if ``stop`` is set meanwhile."""
        delay = self.next_delay()
        if stop is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)

    def reset(self) -> None:
        self.attempt = 0


def make_worker_id(role: str) -> str:
    """A worker id unique across hosts and restarts: ``host:pid:role:random``."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    return f"{host}:{os.getpid()}:{role}:{secrets.token_hex(3)}"


def install_stop_signals(stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT only set ``stop``; a second signal exits at once (safe: every state is crash-safe)."""
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second signal: exiting at once", signal=signal.Signals(signum).name)
            os._exit(FORCED_EXIT_STATUS)
        log.info("stopping", signal=signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)


@dataclass
class RedisHandle:
    """Where Redis is, and the embedded server if this process started (and so owns) it."""

    url: str
    owned: EmbeddedRedis | None = None

    def close(self) -> None:
        if self.owned is not None:
            self.owned.stop()


def resolve_redis(settings: Settings, *, start_embedded: bool = False) -> RedisHandle:
    """The configured Redis URL; without one, the embedded server of the data directory.

    Only ``dataq run`` and ``dataq redis`` start (and own) the embedded server. Every other command attaches to
    it, and while it is not up yet, gets StoreUnavailable and retries like for any Redis outage, so daemons
    started beside it (systemd units, a shell) never race to start a second one.
    """
    if settings.redis.url:
        return RedisHandle(settings.redis.url)
    running = find_running(settings.data_dir)
    if running is not None:
        return RedisHandle(running)
    server = EmbeddedRedis(settings.data_dir, appendfsync=settings.redis.appendfsync)
    if not start_embedded:
        return RedisHandle(server.url)
    server.start()
    log.info("embedded redis-server started", url=server.url, data_dir=settings.data_dir, pid=server.pid)
    return RedisHandle(server.url, owned=server)


def open_store(settings: Settings, url: str, queue: str) -> QueueStore:
    """A store for ``queue`` on ``url`` with the settings' TLS options and event limits."""
    redis = settings.redis
    return QueueStore.from_url(
        url,
        queue,
        events_max_len=settings.events.max_len,
        ca_file=redis.ca_file,
        cert_file=redis.cert_file,
        key_file=redis.key_file,
        socket_timeout=redis.socket_timeout,
    )


async def supervise(name: str, loop_body: Callable[[], Awaitable[None]], stop: asyncio.Event) -> None:
    """Run a background loop until ``stop``; log and restart it (with backoff) whenever it fails."""
    backoff = Backoff()
    while not stop.is_set():
        started = time.monotonic()
        try:
            await loop_body()
            return
        except asyncio.CancelledError:
            raise
        except StoreUnavailable as exc:
            log.warning("redis unavailable", loop=name, error=str(exc))
        except Exception:
            log.exception("background loop failed; restarting it", loop=name)
        if time.monotonic() - started > BACKOFF_CAP * 2:
            backoff.reset()  # it ran well for a while: this is a new incident, not the same one
        await backoff.wait(stop)


async def every(interval: float, stop: asyncio.Event) -> AsyncIterator[float]:
    """Yield about every ``interval`` seconds until ``stop`` is set (at once first)."""
    while not stop.is_set():
        yield time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def cancel_and_wait(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the background tasks and wait for them. A cancel can be swallowed (redis-py loses one that lands
    while a pub/sub connection is being set up), so it is repeated a few times before giving up on a task."""
    pending = {task for task in tasks if not task.done()}
    for _ in range(CANCEL_ATTEMPTS):
        if not pending:
            return
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=CANCEL_WAIT)
    if pending:
        log.warning("background tasks did not stop", tasks=sorted(task.get_name() for task in pending))
