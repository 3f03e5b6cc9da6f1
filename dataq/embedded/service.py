"""``dataq redis``: the embedded redis-server as a service of its own (``dataq-redis.service``).

Under systemd the push and pop daemons are separate units; they attach to this one server through the data
directory's unix socket rather than each starting their own.
"""

from __future__ import annotations

import asyncio

from dataq.config import Settings
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.logs import get_logger
from dataq.runtime import systemd
from dataq.runtime.signals import install_stop_signals
from dataq.runtime.supervise import every

LIVENESS_INTERVAL = 5.0
"""Seconds between checks that redis-server still runs, when systemd asks for no watchdog."""
START_TIMEOUT = 300.0
"""Seconds redis-server may take to load a large AOF before it answers."""

log = get_logger()


async def run_embedded_redis(settings: Settings, *, stop: asyncio.Event | None = None) -> int:
    """Run the data directory's redis-server until stopped; 1 if it dies on its own."""
    if not settings.redis.embedded:
        log.info("[redis] url or sentinels are configured: no embedded redis-server to run",
                 url=settings.redis.url, sentinels=settings.redis.sentinels)
        await systemd.ready("external Redis configured; nothing to run")
        return 0
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    server = EmbeddedRedis(settings.data_dir, appendfsync=settings.redis.appendfsync)
    await asyncio.to_thread(server.start, START_TIMEOUT)
    log.info("embedded redis-server serving", url=server.url, pid=server.pid, data_dir=settings.data_dir)
    await systemd.ready(f"serving {server.url}")
    try:
        async for _ in every(systemd.watchdog_interval() or LIVENESS_INTERVAL, stop):
            if not server.is_running():
                log.error("redis-server exited on its own", data_dir=settings.data_dir)
                return 1
            await systemd.watchdog()
    finally:
        await systemd.stopping("stopping redis-server")
        await asyncio.to_thread(server.stop)
    return 0
