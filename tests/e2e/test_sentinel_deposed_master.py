"""A master the sentinels deposed while it could not answer, and that answers again still a master: clients leave
it for the master the sentinels elected, rather than write where no replica confirms and a resync will erase.

The sentinels reach such a server to make it a replica only some seconds after it is back (ten and more here), and
redis-py asks them for the master only when it opens a connection. Real processes on loopback: a master, two
replicas and three sentinels; SIGSTOP stands for the master cut off, SIGCONT for its return.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from dataq.errors import NotReplicated
from dataq.record import Record
from dataq.store import QueueList, QueueStore
from testbed.sentinel import Address, SentinelTopology
from tests.helpers import make_records
from tests.push_support import QUEUE
from tests.sentinel_support import FAILOVER_TIMEOUT, ha_settings, open_ha_store


async def depose_the_master(topology: SentinelTopology) -> tuple[Address, Address]:
    """Pause the master until every sentinel names another, with a streaming replica, then let it answer again;
    returns (deposed, elected)."""
    deposed = topology.pause_master()
    try:
        await asyncio.to_thread(topology.wait_for_failover, deposed, FAILOVER_TIMEOUT)
        elected = await asyncio.to_thread(topology.wait_for_replicas, 1)
        await asyncio.to_thread(topology.wait_for_sentinels_to_name, elected)
    finally:
        topology.resume(deposed)
    return deposed, elected


async def active_on(address: Address) -> set[str]:
    store = QueueStore.from_url(f"redis://{address[0]}:{address[1]}", QUEUE)
    try:
        return {record.checksum for record in await store.list_records(QueueList.ACTIVE)}
    finally:
        await store.close()


def checksums(records: list[Record]) -> set[str]:
    return {record.checksum for record in records}


@pytest.fixture
async def store_with(two_replica_topology: SentinelTopology, tmp_path: Path) -> AsyncIterator[Callable[[int],
                                                                                                  QueueStore]]:
    """``store_with(min_replicas)``: a store of the topology's master, closed after the test."""
    opened: list[QueueStore] = []

    def open_store(min_replicas: int) -> QueueStore:
        opened.append(open_ha_store(ha_settings(two_replica_topology, tmp_path, min_replicas=min_replicas)))
        return opened[-1]

    yield open_store
    for store in opened:
        await store.close()


@pytest.fixture
def records() -> tuple[list[Record], list[Record]]:
    """Ten records pushed before the fail-over, ten after."""
    everything = make_records(20)
    return everything[:10], everything[10:]


async def test_a_replicated_write_that_finds_its_master_deposed_is_retried_on_the_elected_master(
    two_replica_topology: SentinelTopology, store_with: Callable[[int], QueueStore],
    records: tuple[list[Record], list[Record]],
) -> None:
    before, after = records
    store = store_with(1)
    await store.push_batch(before, source="test")  # the store's connections go to the first master
    _, elected = await depose_the_master(two_replica_topology)
    with pytest.raises(NotReplicated):
        await store.push_batch(after, source="test")  # on a kept connection to the deposed master
    pushed = await store.push_batch(after, source="test")
    assert pushed.pushed == [True] * len(after)
    assert checksums(before) | checksums(after) <= await active_on(elected)
    assert (await store.replication_status()).master == "{}:{}".format(*elected)


async def test_without_min_replicas_the_daemons_watch_leaves_a_deposed_master_before_writing_there(
    two_replica_topology: SentinelTopology, store_with: Callable[[int], QueueStore],
    records: tuple[list[Record], list[Record]],
) -> None:
    before, after = records
    store = store_with(0)
    await store.push_batch(before, source="test")
    _, elected = await depose_the_master(two_replica_topology)
    # What every daemon's replication watch asks every few seconds.
    assert (await store.replication_status()).master == "{}:{}".format(*elected)
    assert (await store.push_batch(after, source="test")).pushed == [True] * len(after)
    # Written to the deposed master instead, they would be lost: its demotion resyncs it from the elected one.
    assert checksums(after) <= await active_on(elected)
