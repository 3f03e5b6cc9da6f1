"""Where a process finds its Redis: the configured URL or sentinels, else the embedded redis-server of the data
directory."""

from __future__ import annotations

from dataclasses import dataclass

from dataq.config import Settings
from dataq.embedded.redis_server import EmbeddedRedis, find_running
from dataq.logs import get_logger
from dataq.store import redis_address

log = get_logger()


@dataclass
class RedisHandle:
    """Where Redis is (a URL, or the ``sentinel://`` address of the sentinels), and the embedded server if this
    process started (and so owns) it."""

    url: str
    owned: EmbeddedRedis | None = None

    def close(self) -> None:
        if self.owned is not None:
            self.owned.stop()


def resolve_redis(settings: Settings, *, start_embedded: bool = False, die_with_parent: bool = False) -> RedisHandle:
    """The configured Redis URL or sentinels; without either, the embedded server of the data directory.

    Only ``dataq run`` starts (and owns) the embedded server here (``dataq redis`` runs one as a service). Every
    other command attaches to it, and while it is not up yet, gets StoreUnavailable and retries like for any Redis
    outage, so daemons started beside it (systemd units, a shell) never race to start a second one. A server
    started with ``die_with_parent`` stops when the calling thread dies (call it from the main thread).
    """
    if settings.redis.url:
        return RedisHandle(settings.redis.url)
    if (sentinels := redis_address(settings)) is not None:
        return RedisHandle(sentinels)
    running = find_running(settings.data_dir)
    if running is not None:
        return RedisHandle(running)
    server = EmbeddedRedis(settings.data_dir, appendfsync=settings.redis.appendfsync, die_with_parent=die_with_parent)
    if not start_embedded:
        return RedisHandle(server.url)
    server.start()
    log.info("embedded redis-server started", url=server.url, data_dir=settings.data_dir, pid=server.pid)
    return RedisHandle(server.url, owned=server)
