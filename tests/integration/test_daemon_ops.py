"""A daemon's outage watch: Redis going away and coming back reaches the operator and the metrics."""

from __future__ import annotations

import asyncio

from dataq.daemon_ops import DaemonOps
from dataq.notify import RedisDownWatch
from dataq.notify.kinds import KIND_REDIS_BACK, KIND_REDIS_DOWN
from dataq.settings import MetricsSettings, Settings
from dataq.store import QueueStore
from tests.conftest import MakeRedis
from tests.pop_support import RecordingNotifier, wait_until


async def test_an_outage_longer_than_the_threshold_is_noticed_then_its_end_counted_as_a_reconnect(
    make_redis: MakeRedis,
) -> None:
    server = make_redis()
    store = QueueStore.from_url(server.url, "transfer", socket_timeout=0.5)
    ops = DaemonOps(Settings(metrics=MetricsSettings(enabled=False)), "transfer", "pop")
    recorder = RecordingNotifier()
    ops.redis_watch = RedisDownWatch(recorder, "transfer", threshold=0.0)
    stop = asyncio.Event()
    await ops.start(store, stop)
    try:
        server.kill()

        async def noticed(kind: str) -> bool:
            return any(notice[0] == kind for notice in recorder.notices)

        await wait_until(lambda: noticed(KIND_REDIS_DOWN), timeout=10, what="the redis-down notice")
        server.start()
        await wait_until(lambda: noticed(KIND_REDIS_BACK), timeout=10, what="the redis-back notice")
        assert 'dataq_redis_reconnects_total{queue="transfer"} 1' in ops.metrics.registry.render()
    finally:
        stop.set()
        await ops.close()
        await store.close()
