"""A Redis Cluster losing a master (real processes on loopback: three masters with a replica each).

The master holding the queue's slot is killed with SIGKILL while records flow; its replica takes over after
``cluster-node-timeout``, every client finds the new master through the slot map, and nothing acknowledged with
``min_replicas = 1`` is lost. The killed node is then started again, as systemd would: it rejoins as the new
master's replica, so that ``min_replicas = 1`` can be met again. Also ``dataq run`` serving a queue on a cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataq.actions.testing import marks
from dataq.config import QueueSettings
from dataq.embedded.redis_server import free_port
from dataq.errors import StoreUnavailable
from dataq.feed.client import Feeder
from dataq.store import Flag, QueueStore
from testbed.cluster import ClusterTopology
from testbed.waits import eventually
from tests.cluster_support import cluster_settings, queue_on_master
from tests.helpers import make_records
from tests.pop_support import daemon_env, pop_daemon
from tests.push_support import (
    LOOPBACK,
    QUEUE,
    dataq_command,
    every_record_pushed_and_active,
    feed_across,
)

FAILOVER_TIMEOUT = 60.0
FEED_TIMEOUT = 180.0


@pytest.fixture
async def queue_store(replicated_cluster: ClusterTopology, tmp_path: Path) -> AsyncIterator[QueueStore]:
    """A store of the tests' queue (``QUEUE``, which the push and pop helpers serve) with ``min_replicas = 1``."""
    store = QueueStore.open(cluster_settings(replicated_cluster.url, tmp_path, [QUEUE], min_replicas=1),
                            replicated_cluster.url, QUEUE)
    yield store
    await store.close()


async def fail_over(topology: ClusterTopology, store: QueueStore) -> None:
    """Kill the master of the queue's slot, wait for its replica to take over, start the killed node again and
    wait until the cluster is whole."""
    old = topology.master_of(store.keys.records)
    topology.kill(old)
    await asyncio.to_thread(topology.wait_for_failover, store.keys.records, old, FAILOVER_TIMEOUT)
    await asyncio.to_thread(topology.restart_killed)


async def test_a_pipelined_feed_completes_across_a_master_kill_and_every_pushed_record_is_on_the_new_master(
    replicated_cluster: ClusterTopology, queue_store: QueueStore, tmp_path: Path
) -> None:
    old = replicated_cluster.master_of(queue_store.keys.records)
    records = make_records(20_000)
    settings = cluster_settings(replicated_cluster.url, tmp_path, [QUEUE], min_replicas=1)
    result = await feed_across(settings, records, lambda: fail_over(replicated_cluster, queue_store), FEED_TIMEOUT)
    assert replicated_cluster.master_of(queue_store.keys.records) != old
    await every_record_pushed_and_active(result, records, queue_store)


async def test_a_pop_daemon_running_a_slow_action_finishes_every_record_across_a_master_kill(
    replicated_cluster: ClusterTopology, queue_store: QueueStore, tmp_path: Path
) -> None:
    marks_dir = tmp_path / "marks"
    marks_dir.mkdir()
    settings = cluster_settings(replicated_cluster.url, tmp_path, [QUEUE], min_replicas=1)
    settings = dataclasses.replace(settings, queues={QUEUE: QueueSettings(
        QUEUE, actions=("mark",), action_options={"mark": {"dir": str(marks_dir), "seconds": 0.05}})})
    records = make_records(300)
    await queue_store.push_batch(records, source="test")
    async with pop_daemon(settings, concurrency=8):

        async def running() -> bool:
            return len(marks(marks_dir)) >= 50

        await eventually(running, what="records running")
        await fail_over(replicated_cluster, queue_store)

        async def settled() -> bool:
            try:
                summary = await queue_store.summary()
            except StoreUnavailable:  # this client's first call after the fail-over: it was told MOVED
                return False
            return summary.tracked - summary.inactive == 0

        await eventually(settled, timeout=FEED_TIMEOUT, what="every record done or inactive")
    summary = await queue_store.summary()
    ran = marks(marks_dir)
    print(f"re-runs after the fail-over: {len(ran) - len(set(ran))} of {len(records)} records")
    assert summary.inactive == 0
    assert set(ran) == {record.checksum for record in records}


@pytest.mark.timeout(120)
async def test_dataq_run_serves_a_queue_on_a_cluster_without_embedding_redis(
    redis_cluster: ClusterTopology, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    queue = queue_on_master(2, "suite")
    port = free_port()
    config = tmp_path / "dataq.toml"
    config.write_text("\n".join([
        f'data_dir = "{tmp_path / "data"}"', "[redis]", f'url = "{redis_cluster.url}"', "cluster = true",
        "[log]", f'dir = "{tmp_path / "log"}"', 'level = "warning"', "[push]", f"port = {port}",
        "[pop]", "heartbeat_interval = 0.2", "heartbeat_ttl = 2.0", "sweep_interval = 0.2", "grace_period = 2.0",
        "[metrics]", "enabled = false", f"[queues.{queue}]", 'actions = ["echo"]',
    ]) + "\n")
    suite = subprocess.Popen([*dataq_command(), "run", "--config", str(config)],
                             env={**daemon_env(), "HOME": str(tmp_path)}, stderr=subprocess.PIPE)
    children.append(suite)
    store = QueueStore.open(cluster_settings(redis_cluster.url, tmp_path, [queue]), redis_cluster.url, queue)
    try:
        result = await Feeder(LOOPBACK, port, window=50, retry_for=30).feed(make_records(200))
        assert (result.pushed, result.errors) == (200, 0)

        async def drained() -> bool:
            return (await store.counters()).get("done", 0) >= 200

        await eventually(drained, timeout=30, what="200 records done")
        roles = sorted(str(worker.info["role"]) for worker in await store.workers())
        assert roles == ["pop", "push"]
    finally:
        await store.close()
    suite.send_signal(signal.SIGINT)
    _, stderr = suite.communicate(timeout=60)
    assert suite.returncode == 0, stderr.decode()[-2000:]
    assert not (tmp_path / "data" / "redis.pid").exists()


async def test_a_planned_fail_over_moves_the_feed_and_the_notices_to_the_promoted_replica(
    replicated_cluster: ClusterTopology, queue_store: QueueStore, tmp_path: Path
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    interruptions: list[str] = []

    async def listen() -> None:  # as the daemons do: subscribe again after a backoff
        while True:
            try:
                async for notice in queue_store.notices(work=False):
                    heard.put_nowait(notice)
            except StoreUnavailable as exc:
                interruptions.append(str(exc))
            await asyncio.sleep(0.1)

    listener = asyncio.create_task(listen())
    records = make_records(20_000)
    settings = cluster_settings(replicated_cluster.url, tmp_path, [QUEUE], min_replicas=1)
    old = replicated_cluster.master_of(queue_store.keys.records)

    async def planned_fail_over() -> None:
        await asyncio.to_thread(replicated_cluster.fail_over_gracefully, queue_store.keys.records)

    try:
        await eventually(lambda: flag_heard(queue_store, heard, on=False))
        before = len(interruptions)
        result = await feed_across(settings, records, planned_fail_over, FEED_TIMEOUT)
        # The old master, now a replica, told this client MOVED (a refusal: nothing ran) and unsubscribed the
        # listener (its connection stays up); both found the new master.
        assert replicated_cluster.master_of(queue_store.keys.records) != old
        await eventually(lambda: flag_heard(queue_store, heard, on=True))
        assert any("notices moved to another Redis node" in reason for reason in interruptions[before:]), \
            interruptions
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
    await every_record_pushed_and_active(result, records, queue_store)


async def flag_heard(store: QueueStore, heard: asyncio.Queue[str], *, on: bool) -> bool:
    """Switch the action flag (no pop daemon runs here) and whether its notice came back."""
    try:
        await store.set_flag(Flag.ACTION, on)
        notice = await asyncio.wait_for(heard.get(), 0.5)
    except (StoreUnavailable, TimeoutError):
        return False
    return notice == f"flag:action:{'on' if on else 'off'}"
