"""How a queue is doing, read the same way by dataq-cli, the metrics and (soon) the web console: the daemons'
health and the rates of the last minute. Pure unit tests, on fakeredis."""

from __future__ import annotations

import time

from dataq.ops.health import RATE_WINDOW, check_health, rates
from tests.helpers import fake_store, make_records


async def test_a_queue_without_daemons_is_unhealthy_and_says_why() -> None:
    health = await check_health(fake_store())
    assert (health.healthy, health.alive, health.registered) == (False, 0, 0)
    assert health.reason == "no daemon is running for queue transfer"


async def test_every_daemon_with_a_fresh_heartbeat_is_healthy() -> None:
    store = fake_store()
    for worker in ("h:1:push:a", "h:2:pop:b"):
        await store.heartbeat(worker, {"role": worker.split(":")[2]}, {}, ttl=30)
    health = await check_health(store)
    assert (health.healthy, health.alive, health.registered) == (True, 2, 2)
    assert health.reason == "Redis answers; 2 daemons are alive for queue transfer"


async def test_a_daemon_whose_heartbeat_expired_makes_the_queue_unhealthy() -> None:
    store = fake_store()
    await store.heartbeat("h:1:push:a", {"role": "push"}, {}, ttl=30)
    await store.heartbeat("h:2:pop:dead", {"role": "pop"}, {}, ttl=30)
    await store.r.delete(store.keys.heartbeat("h:2:pop:dead"))  # as its TTL would
    health = await check_health(store)
    assert (health.healthy, health.alive, health.registered) == (False, 1, 2)
    assert health.reason == "worker h:2:pop:dead has no fresh heartbeat (1 of 2 alive)"


async def test_rates_count_the_last_minutes_events_per_minute() -> None:
    store = fake_store()
    for start in (0, 10, 20):  # three pushes of ten records: three events of one entry each
        await store.push_batch(make_records(10, start=start), source="t")
    measured = await rates(store, now=time.time())
    assert measured.per_minute["pushed"] == 30.0 * 60.0 / RATE_WINDOW
    assert measured.per_minute["done"] == 0.0
    assert measured.complete
