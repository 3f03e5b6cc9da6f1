"""A daemon's outage watch: Redis going away and coming back reaches the operator and the metrics."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import generate_latest

from dataq.config import MailSettings, MetricsSettings, Settings
from dataq.ops.daemon_ops import DaemonOps
from dataq.ops.notices import KIND_REDIS_BACK, KIND_REDIS_DOWN
from dataq.runtime.supervise import Supervisor
from dataq.store import QueueStore
from testbed.waits import eventually
from tests.conftest import MakeRedis
from tests.helpers import make_records
from tests.pop_support import RecordingNotifier


async def test_an_outage_longer_than_the_threshold_is_noticed_then_its_end_counted_as_a_reconnect(
    make_redis: MakeRedis,
) -> None:
    server = make_redis()
    store = QueueStore.from_url(server.url, "transfer", socket_timeout=0.5)
    recorder = RecordingNotifier()
    settings = Settings(metrics=MetricsSettings(enabled=False), mail=MailSettings(redis_down_after=0.0))
    ops = DaemonOps(settings, "transfer", "pop", dict, notifier=recorder)
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    await ops.start(store, supervisor, until=stop)
    try:
        server.kill()

        async def noticed(kind: str) -> bool:
            return any(notice.kind == kind for notice in recorder.notices)

        await eventually(lambda: noticed(KIND_REDIS_DOWN), timeout=10, what="the redis-down notice")
        server.start()
        await eventually(lambda: noticed(KIND_REDIS_BACK), timeout=10, what="the redis-back notice")
        assert b'dataq_redis_reconnects_total{queue="transfer"} 1.0' in generate_latest(ops.metrics.registry)
    finally:
        stop.set()
        await ops.close()
        await supervisor.cancel()
        await store.close()
    assert supervisor.failed is None


async def test_a_pop_daemon_notes_how_long_the_next_record_has_waited_for_the_consoles_plot(store: QueueStore) -> None:
    await store.push_batch(make_records(2), "test", now=time.time() - 90)  # waiting a minute and a half already
    settings = Settings(metrics=MetricsSettings(enabled=False))
    ops = DaemonOps(settings, "transfer", "pop", dict, notifier=RecordingNotifier())
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    await ops.start(store, supervisor, until=stop)
    try:
        async def noted() -> bool:
            levels = [bucket.levels["backlog_age"] for bucket in (await store.rate_history(30)).buckets]
            return any(level is not None and level >= 90 for level in levels)

        await eventually(noted, timeout=10, what="the backlog's age in the rates ring")
    finally:
        stop.set()
        await ops.close()
        await supervisor.cancel()
    assert supervisor.failed is None
