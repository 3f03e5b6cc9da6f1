"""dataq on a Redis Cluster of three masters (real processes on loopback): each queue lives on the master holding
its slot; push and pop daemons, the CLI, the actions' lease, the metrics and pub/sub notices work unchanged; every
script keeps its keys in the queue's slot; and a cluster whose slot map cannot be read yet is an outage, retried."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from dataq.actions.testing import marks
from dataq.cli.console import main
from dataq.config import QueueSettings
from dataq.config.activity_settings import ActivitySettings
from dataq.errors import LeaseLost, StoreUnavailable
from dataq.feed.client import Feeder
from dataq.ops.metrics import QUEUE_LENGTH, REDIS_UP, DaemonMetrics
from dataq.pop.daemon import run_pop_daemon
from dataq.push.daemon import run_push_daemon
from dataq.store import CustodyEntry, CustodyStep, Flag, QueueList, QueueStore, RetryPolicy, Step
from dataq.store.connection import SCRIPT_NAMES
from testbed.cluster import ClusterTopology
from testbed.waits import eventually
from tests.cluster_support import cluster_settings, queue_on_master, queues_on_each_master
from tests.helpers import make_records
from tests.push_support import LOOPBACK, STARTUP_TIMEOUT

WORKER = "host-1:100:a"


@contextlib.asynccontextmanager
async def cluster_store(topology: ClusterTopology, tmp_path: Path, queue: str,
                        **settings: Any) -> AsyncIterator[QueueStore]:
    store = QueueStore.open(cluster_settings(topology.url, tmp_path, [queue], **settings), topology.url, queue)
    try:
        yield store
    finally:
        await store.close()


def keys_by_node(topology: ClusterTopology) -> dict[tuple[str, int], set[str]]:
    """Every dataq key of each master."""
    found = {}
    for host, port in topology.masters():
        with redis.Redis(host=host, port=port, decode_responses=True) as node:
            found[(host, port)] = set(node.scan_iter("dq:*"))
    return found


async def test_three_queues_on_three_masters_are_fed_and_drained_each_on_its_own_master(
    redis_cluster: ClusterTopology, tmp_path: Path
) -> None:
    queues = queues_on_each_master("feed")
    dirs = {queue: tmp_path / f"marks-{queue}" for queue in queues}
    for directory in dirs.values():
        directory.mkdir()
    settings = dataclasses.replace(cluster_settings(redis_cluster.url, tmp_path / "data", queues), queues={
        q: QueueSettings(q, actions=("mark",), action_options={"mark": {"dir": str(dirs[q])}}) for q in queues})
    stop = asyncio.Event()
    ports: dict[str, asyncio.Future[tuple[str, int]]] = {q: asyncio.get_running_loop().create_future()
                                                         for q in queues}
    daemons = [asyncio.create_task(run_push_daemon(settings, q, stop=stop, ready=ports[q].set_result))
               for q in queues]
    daemons += [asyncio.create_task(run_pop_daemon(settings, q, stop=stop)) for q in queues]
    records = {q: make_records(300, start=1000 * index) for index, q in enumerate(queues)}
    try:
        await asyncio.wait_for(asyncio.gather(*ports.values()), STARTUP_TIMEOUT)
        results = await asyncio.gather(*(Feeder(LOOPBACK, ports[q].result()[1], window=50).feed(records[q])
                                         for q in queues))
        assert [(r.pushed, r.errors, r.ignored) for r in results] == [(300, 0, 0)] * 3

        async def drained() -> bool:
            return all(len(marks(dirs[q])) >= 300 for q in queues)

        await eventually(drained, timeout=60, what="every queue drained")
    finally:
        stop.set()
        assert await asyncio.wait_for(asyncio.gather(*daemons), 30) == [0] * 6
    for q in queues:
        assert sorted(marks(dirs[q])) == sorted(record.checksum for record in records[q])
    on_nodes = keys_by_node(redis_cluster)
    for master, q in zip(redis_cluster.masters(), queues, strict=True):
        mine = {key for key in on_nodes[master] if key.startswith(f"dq:{{{q}}}:")}
        assert {key.split(":")[2] for key in mine} == {"counters", "done", "events", "rates", "names",
                                                       "names_count"}, mine
        elsewhere = [node for node, keys in on_nodes.items() if node != master
                     and any(key.startswith(f"dq:{{{q}}}:") for key in keys)]
        assert elsewhere == [], f"keys of {q} outside its master"


async def test_every_lua_script_keeps_its_keys_in_the_queue_s_slot(
    redis_cluster: ClusterTopology, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = queue_on_master(1, "scripts")
    ran: set[str] = set()
    original = QueueStore._script

    async def recording(self: QueueStore, name: str, *args: Any, **kwargs: Any) -> Any:
        ran.add(name)
        return await original(self, name, *args, **kwargs)

    monkeypatch.setattr(QueueStore, "_script", recording)
    # With activities, so that every activity's list is in the queue's slot too.
    activities = {"backfill": ActivitySettings("backfill", strict=True)}
    async with cluster_store(redis_cluster, tmp_path, queue, activities=activities) as store:
        records = [replace(r, activity="backfill") if n % 2 else r for n, r in enumerate(make_records(12))]
        ids = [record.checksum for record in records]
        await store.push_batch(records, source="test")
        assert await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=0.2)
        claim = await store.claim(WORKER, 4)
        assert await store.ack(WORKER, [(claim.records[0].checksum, "done")]) == [True]
        await store.fail(WORKER, [(claim.records[1].checksum, "boom")], max_errors=3,
                         retry=RetryPolicy(delay=0.001, backoff=1.0, max_delay=1.0))
        await store.postpone(WORKER, [(claim.records[2].checksum, "down")])
        await asyncio.sleep(0.01)
        assert await store.promote_due() == 1
        await store.release(WORKER)
        await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=0.05)
        await store.claim(WORKER, 1)
        await asyncio.sleep(0.1)
        assert await store.reclaim_dead(WORKER, max_crashes=5) is not None
        active = [record.checksum for record in await store.list_records(QueueList.ACTIVE)]
        assert await store.deactivate(active[0], active[1]) == 2
        assert await store.activate_all() == 2
        assert await store.advance(active[2], active[2]) == 1
        assert await store.set_flag(Flag.READ, False) is True
        async with cluster_store(redis_cluster, tmp_path, queue) as without_activities:
            assert await without_activities.adopt_unserved() > 0
        done_id = claim.records[0].checksum
        now = time.time()
        await store.keep([CustodyEntry(claim.records[0], "next:1", now)], first_ask=now)
        (entry,) = await store.custody_due(10, now=now + 1)
        assert len(await store.whereabouts([done_id, "f" * 32], max_errors=0)) == 2
        assert await store.apply_steps([CustodyStep(Step.DONE, entry, end_at=now + 1)], 60) == [True]
        assert await store.clear() == len(ids) - 1
        assert await store.mark_lost([(done_id, "missing_copy: a test")]) == [True]
        assert await store.forget_done() == 0
        await store.note_backlog_age(12.0)
        assert ran == set(SCRIPT_NAMES)
        other = queue_on_master(1, "other")
        # The check is live: the same script with one key of another queue is refused.
        with pytest.raises(redis.exceptions.ClusterCrossSlotError):
            await original(store, "set_flag", [store.keys.flags, store.keys.events.replace(queue, other)],
                           ["read", "on", 10, store.keys.notices, "test"])


async def test_flag_and_work_notices_go_by_sharded_pub_sub_on_the_queue_s_master(
    redis_cluster: ClusterTopology, tmp_path: Path
) -> None:
    queue = queue_on_master(2, "notices")
    async with cluster_store(redis_cluster, tmp_path, queue) as store:
        heard: asyncio.Queue[str] = asyncio.Queue()

        async def listen() -> None:
            async for notice in store.notices():
                heard.put_nowait(notice)

        listener = asyncio.create_task(listen())
        host, port = redis_cluster.master_of(store.keys.records)
        with redis.Redis(host=host, port=port, decode_responses=True) as master:

            async def subscribed() -> bool:
                return dict(master.pubsub_shardnumsub(store.keys.notices, store.keys.work)) == {
                    store.keys.notices: 1, store.keys.work: 1}

            await eventually(subscribed)
            assert dict(master.pubsub_numsub(store.keys.notices)) == {store.keys.notices: 0}
        try:
            await store.set_flag(Flag.ACTION, False)
            assert await asyncio.wait_for(heard.get(), 5) == "flag:action:off"
            await store.push_batch(make_records(1), source="test")
            assert await asyncio.wait_for(heard.get(), 5) == "work"
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)


def test_the_cli_shows_the_cluster_s_nodes_and_the_master_holding_the_queue(
    redis_cluster: ClusterTopology, tmp_path: Path
) -> None:
    queue = queue_on_master(0, "cli")
    config = tmp_path / "dataq.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n[redis]\nurl = "{redis_cluster.url}"\ncluster = true\n'
                      f'[log]\ndir = "{tmp_path / "log"}"\n[queues.{queue}]\n')

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, ["--config", str(config), "--queue", queue, *args])
        assert result.exit_code == 0, result.output
        return result.output

    master = "{}:{}".format(*redis_cluster.master_of(f"dq:{{{queue}}}:records"))
    run("--pushstr", "/data/a.fits 0123456789abcdef0123456789abcdef 10")
    info = run("--info")
    assert re.search(rf"^master:\s+{re.escape(master)}$", info, re.MULTILINE), info
    assert "3 masters, 0 replicas; the queue is in slot" in info
    assert f"{master} master of slots 0-5460 (holds the queue)" in info
    assert "master of slots 5461-10922" in info and "master of slots 10923-16383" in info
    summary = run("--summary")
    assert "active:    1" in summary and f"on {master}" in summary
    listed = run("--list", "active")
    assert listed.strip() == "0123456789abcdef0123456789abcdef : path=/data/a.fits, size=10"
    (document,) = [json.loads(line) for line in run("--json", "--info").splitlines()]
    nodes = document["replication"]["cluster"]["nodes"]
    assert [node["holds_queue"] for node in nodes] == [True, False, False]
    assert {node["role"] for node in nodes} == {"master"}


async def test_the_actions_lease_and_the_metrics_work_on_the_queue_s_master(
    redis_cluster: ClusterTopology, tmp_path: Path
) -> None:
    queue = queue_on_master(1, "lease")
    async with cluster_store(redis_cluster, tmp_path, queue) as store, \
            cluster_store(redis_cluster, tmp_path, queue) as other:
        host, port = redis_cluster.master_of(store.keys.records)
        async with store.lease("catalog", ttl=5, wait=1):
            with redis.Redis(host=host, port=port, decode_responses=True) as master:
                assert master.exists(store.keys.lock("catalog")) == 1
            with pytest.raises(LeaseLost, match="stayed with another holder"):
                async with other.lease("catalog", ttl=5, wait=0.2):
                    pass
        await store.push_batch(make_records(7), source="test")
        metrics = DaemonMetrics(queue, "push", dict)
        assert await metrics.refresh(store) is None
        samples = {(sample.name, sample.labels.get("list")): sample.value
                   for family in metrics.families() for sample in family.samples}
        assert samples[(REDIS_UP, None)] == 1
        assert samples[(QUEUE_LENGTH, "active")] == 7


async def test_a_cluster_whose_slots_cannot_be_read_yet_is_an_outage_named_and_retried_until_it_can(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    plain = QueueStore.open(cluster_settings(redis_url, tmp_path, ["plain"]), redis_url, "plain")
    try:
        with pytest.raises(StoreUnavailable, match="cannot read the Redis Cluster's slots"):
            await plain.summary()
    finally:
        await plain.close()
    late = ClusterTopology(tmp_path_factory.mktemp("late-cluster"))
    try:
        late.start_nodes()
        store = QueueStore.open(cluster_settings(late.url, tmp_path, ["late"]), late.url, "late")
        try:
            # Nodes that know no slot yet: redis-py forgets every node it knew; the map keeps asking them.
            for _ in range(2):
                with pytest.raises(StoreUnavailable, match="cannot read the Redis Cluster's slots"):
                    await store.summary()
            await asyncio.to_thread(late.create)

            async def answers() -> bool:
                with contextlib.suppress(StoreUnavailable):
                    return (await store.summary()).queue == "late"
                return False

            await eventually(answers)
        finally:
            await store.close()
    finally:
        late.stop()
