"""How a queue is doing, read the same way by dataq-cli, the metrics and (soon) the web console: the daemons'
health and the rates of the last minute. Pure unit tests, on fakeredis."""

from __future__ import annotations

import dataclasses

from dataq.ops.health import RATE_WINDOW, REPLICA_LAG_WARNING, check_health, rates, replication_problems
from dataq.store import ClusterMember, ClusterStatus, Replica, ReplicationStatus
from testbed.actions import fake_store
from tests.helpers import make_records


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


async def test_rates_count_the_last_minutes_records_per_minute() -> None:
    store = fake_store()
    for start in (0, 10, 20):
        await store.push_batch(make_records(10, start=start), source="t")
    measured = await rates(store)
    assert measured.window == RATE_WINDOW and 50 <= measured.covered <= RATE_WINDOW
    assert measured.per_minute["pushed"] == 30 * 60 / measured.covered
    assert measured.per_minute["done"] == 0.0
    assert measured.complete


# --- replication ---------------------------------------------------------------------------------------------


def status(*replicas: Replica, min_replicas: int = 1,
           sentinels: dict[str, bool] | None = None) -> ReplicationStatus:
    return ReplicationStatus("10.0.0.1:6379", replicas, min_replicas, sentinels)


ONLINE = Replica("10.0.0.2:6379", "online", 0, 0)


def test_a_healthy_replication_has_no_problem() -> None:
    assert replication_problems(status(ONLINE, sentinels={"10.0.0.1:26379": True, "10.0.0.2:26379": True})) == []


def test_fewer_replicas_than_min_replicas_come_first_and_say_writes_are_refused() -> None:
    problems = replication_problems(status(Replica("10.0.0.2:6379", "wait_bgsave", 0, None), min_replicas=1))
    assert problems == [
        "only 0 replica(s) connected to the master 10.0.0.1:6379, min_replicas is 1: writes are refused",
        "replica 10.0.0.2:6379 is wait_bgsave",
    ]


def test_a_replica_falling_behind_and_a_silent_sentinel_are_named() -> None:
    behind = Replica("10.0.0.3:6379", "online", 5_000_000, REPLICA_LAG_WARNING)
    problems = replication_problems(status(ONLINE, behind, sentinels={"a:1": True, "b:2": False, "c:3": True}))
    assert problems == [
        f"replica 10.0.0.3:6379 has not acknowledged for {REPLICA_LAG_WARNING} s",
        "sentinel(s) b:2 do not answer (2 of 3 do)",
    ]


def test_a_failing_cluster_node_is_named() -> None:
    members = (ClusterMember("10.0.0.1:7000", "master", None, "0-5460", True, True),
               ClusterMember("10.0.0.2:7000", "master", None, "5461-16383", False, False),
               ClusterMember("10.0.0.3:7000", "replica", "10.0.0.1:7000", "", True, False))
    degraded = ReplicationStatus("10.0.0.1:7000", (ONLINE,), 1, None, ClusterStatus(866, members))
    assert replication_problems(degraded) == ["cluster node(s) 10.0.0.2:7000 (master) failing or unreachable"]
    whole = dataclasses.replace(degraded, cluster=ClusterStatus(866, (members[0], members[2])))
    assert replication_problems(whole) == []
