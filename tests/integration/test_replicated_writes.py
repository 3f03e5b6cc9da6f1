"""``min_replicas``: a write a fail-over must not undo is acknowledged only once that many replicas hold it.

Here with plain replication (a ``url`` and one replica); the Sentinel tests add fail-overs. A replica frozen with
SIGSTOP is one that confirms nothing in time.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataq.config import RedisSettings, Settings
from dataq.embedded.locate import resolve_redis
from dataq.embedded.redis_server import find_running
from dataq.embedded.service import run_embedded_redis
from dataq.errors import NotReplicated
from dataq.feed.client import Feeder
from dataq.keys import QueueKeys
from dataq.protocol import ReplyKind
from dataq.store import QueueList, QueueStore
from testbed.waits import eventually
from tests.helpers import make_records
from tests.push_support import (
    LOOPBACK,
    QUEUE,
    LineClient,
    RunningPush,
    push_settings,
    reply_for,
    start_push,
)
from tests.replica_support import ReplicaPair

WORKER = "host-1:100:a"
KEYS = QueueKeys(QUEUE)
TIMEOUT = 1.0
NOT_REPLICATED = f"Error: not replicated to 1 replica(s) within {TIMEOUT:g} s"


def replicated_settings(url: str, data_dir: Path, min_replicas: int = 1) -> Settings:
    settings = push_settings(url, data_dir)
    redis = RedisSettings(url=url, socket_timeout=5.0, min_replicas=min_replicas, replica_timeout=TIMEOUT)
    return dataclasses.replace(settings, redis=redis)


@pytest.fixture
async def replicated_store(replica_pair: ReplicaPair, tmp_path: Path) -> AsyncIterator[QueueStore]:
    store = QueueStore.open(replicated_settings(replica_pair.master.url, tmp_path), replica_pair.master.url, QUEUE)
    yield store
    await store.close()


@pytest.fixture
async def replicated_push(replica_pair: ReplicaPair, tmp_path: Path) -> AsyncIterator[RunningPush]:
    """A push daemon on the master with ``min_replicas = 1``."""
    daemon = await start_push(replicated_settings(replica_pair.master.url, tmp_path))
    yield daemon
    await daemon.shutdown()


@pytest.fixture
async def client(replicated_push: RunningPush) -> AsyncIterator[LineClient]:
    line_client = await LineClient.connect(replicated_push.port)
    yield line_client
    await line_client.close()


async def test_every_record_answered_pushed_is_already_on_the_replica(
    replica_pair: ReplicaPair, client: LineClient
) -> None:
    records = make_records(200)
    await client.send(*records)
    assert await client.replies(len(records)) == [reply_for(r) for r in records]
    # Read at once, without waiting for the replica to catch up: WAIT already did.
    replica = replica_pair.replica_client()
    assert replica.hlen(KEYS.records) == len(records)
    replica.close()


async def test_one_feeder_s_records_keep_their_order_while_batches_wait_for_the_replica(
    replicated_push: RunningPush, replicated_store: QueueStore
) -> None:
    # The next batch of a connection is written while the one before waits for the replica: still in order.
    records = make_records(5_000)
    result = await Feeder(LOOPBACK, replicated_push.port, window=1_000).feed(records)
    assert (result.pushed, result.errors) == (len(records), 0)
    listed = await replicated_store.list_records(QueueList.ACTIVE)
    assert [r.checksum for r in listed] == [r.checksum for r in reversed(records)]


async def test_records_the_replica_did_not_confirm_are_refused_and_their_resend_is_pushed_not_ignored(
    replica_pair: ReplicaPair, replicated_store: QueueStore, client: LineClient
) -> None:
    records = make_records(3)
    with replica_pair.replica_held():
        await client.send(*records)
        assert await client.replies(3) == [NOT_REPLICATED] * 3
    await client.send(*records)
    assert await client.replies(3) == [reply_for(r) for r in records]
    listed = await replicated_store.list_records(QueueList.ACTIVE)
    assert sorted(r.checksum for r in listed) == sorted(r.checksum for r in records)


async def test_a_feeder_sends_refused_records_again_until_the_replica_confirms_them(
    replica_pair: ReplicaPair, replicated_push: RunningPush
) -> None:
    records = make_records(50)
    feeder = Feeder(LOOPBACK, replicated_push.port, window=10)
    with replica_pair.replica_held():
        feed = asyncio.create_task(feeder.feed(records))

        async def resending() -> bool:
            return feeder.result.resent > 0

        await eventually(resending)
    result = await asyncio.wait_for(feed, 60)
    assert (result.pushed, result.ignored, result.errors) == (len(records), 0, 0)
    assert [reply.kind for reply in result.replies or []] == [ReplyKind.PUSHED] * len(records)


async def test_an_ack_the_replica_did_not_confirm_raises_and_its_retry_waits_for_the_first_ack(
    replica_pair: ReplicaPair, replicated_store: QueueStore
) -> None:
    store = replicated_store
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    await store.heartbeat(WORKER, {"role": "pop"}, {}, 10.0)
    await store.claim(WORKER, 1)
    with replica_pair.replica_held(), pytest.raises(NotReplicated, match=r"not replicated to 1 replica\(s\)"):
        await store.ack(WORKER, [(record.checksum, "1ms")])
    # The retry finds the record acknowledged (the first ack landed on the master) and writes nothing of its own,
    # so it carries a write that makes its WAIT cover the first ack.
    assert await store.ack(WORKER, [(record.checksum, "1ms")]) == [False]
    assert (await store.counters())["replica_retries"] == 1
    replica = replica_pair.replica_client()
    assert replica.llen(KEYS.processing(WORKER)) == 0
    assert replica.hlen(KEYS.records) == 0
    replica.close()


async def test_a_range_move_and_a_flag_switch_wait_for_the_replica(
    replica_pair: ReplicaPair, replicated_store: QueueStore
) -> None:
    store = replicated_store
    records = make_records(3)
    await store.push_batch(records, source="t")
    with replica_pair.replica_held():
        with pytest.raises(NotReplicated):
            await store.deactivate(records[0].checksum, records[0].checksum)
        with pytest.raises(NotReplicated):
            await store.set_flag(next(iter(await store.flags())), False)
    assert await store.deactivate(records[1].checksum, records[1].checksum) == 1
    replica = replica_pair.replica_client()
    assert replica.llen(KEYS.inactive) == 2
    replica.close()


async def test_without_min_replicas_nothing_waits_for_a_replica(
    replica_pair: ReplicaPair, tmp_path: Path
) -> None:
    url = replica_pair.master.url
    store = QueueStore.open(replicated_settings(url, tmp_path, min_replicas=0), url, QUEUE)
    try:
        with replica_pair.replica_held():
            result = await store.push_batch(make_records(2), source="t")
        assert result.pushed == [True, True]
    finally:
        await store.close()


async def test_with_sentinels_configured_no_embedded_redis_is_run_or_looked_for(tmp_path: Path) -> None:
    redis = RedisSettings(sentinels=("127.0.0.1:26379", "[::1]:26380"), master_name="dataq")
    settings = Settings(data_dir=str(tmp_path / "data"), redis=redis)
    assert await run_embedded_redis(settings) == 0
    assert find_running(tmp_path / "data") is None
    assert resolve_redis(settings, start_embedded=True).url == "sentinel://127.0.0.1:26379,[::1]:26380/dataq"
