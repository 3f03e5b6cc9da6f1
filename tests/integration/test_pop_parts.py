"""Parts of the pop daemon on their own: the sweeper."""

from __future__ import annotations

import asyncio

from dataq.config import EventSettings, PopSettings
from dataq.pop.sweeper import Sweeper
from dataq.store import QueueList, QueueStore, RetryPolicy
from tests.helpers import make_records
from tests.pop_support import RecordingNotifier

DEAD = "host-9:900:pop:dead"
ALIVE = "host-8:800:pop:alive"


async def claim_as(store: QueueStore, worker: str, count: int, ttl: float) -> None:
    await store.heartbeat(worker, {"role": "pop"}, {}, ttl)
    assert len((await store.claim(worker, count)).records) == count


async def test_a_sweep_returns_dead_workers_records_next_in_line_and_spares_live_ones(store: QueueStore) -> None:
    records = make_records(5)
    await store.push_batch(records, source="t")
    await claim_as(store, DEAD, 2, ttl=0.05)
    await claim_as(store, ALIVE, 2, ttl=30)
    await asyncio.sleep(0.1)
    sweeper = Sweeper(store, PopSettings(), EventSettings(), RecordingNotifier())
    swept = await sweeper.sweep()
    assert (swept.reclaimed_workers, swept.returned, swept.deactivated) == (1, 2, 0)
    assert await store.processing(ALIVE) != [] and await store.processing(DEAD) == []
    active = await store.list_records(QueueList.ACTIVE)
    assert [r.checksum for r in reversed(active)] == [records[0].checksum, records[1].checksum, records[4].checksum]
    assert [w.worker_id for w in await store.workers()] == [ALIVE]
    assert (await sweeper.sweep()).returned == 0  # a second sweeper finds nothing left


async def test_the_sweeper_never_takes_back_its_own_workers_records(store: QueueStore) -> None:
    await store.push_batch(make_records(2), source="t")
    await claim_as(store, DEAD, 2, ttl=0.05)  # e.g. a Redis outage outlived our heartbeat
    await asyncio.sleep(0.1)
    own = Sweeper(store, PopSettings(), EventSettings(), RecordingNotifier(), own_worker=DEAD)
    assert (await own.sweep()).returned == 0
    assert len(await store.processing(DEAD)) == 2


async def test_a_record_in_too_many_crashes_goes_inactive_with_a_notice(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    notifier = RecordingNotifier()
    sweeper = Sweeper(store, PopSettings(max_crashes=1), EventSettings(), notifier)
    for crash in range(2):
        await claim_as(store, f"{DEAD}{crash}", 1, ttl=0.05)
        await asyncio.sleep(0.1)
        await sweeper.sweep()
    state = await store.record_state(record.checksum)
    assert state is not None and (state.where, state.crashes) == ("inactive", 2)
    ((kind, subject, details),) = notifier.notices
    assert kind == "inactive" and "died while running them more than 1 time" in subject
    assert details["reason"] == "crashes" and details["count"] == 1


async def test_a_sweep_promotes_due_retries(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    await claim_as(store, ALIVE, 1, ttl=30)
    await store.fail(ALIVE, [(record.checksum, "x")], max_errors=3, retry=RetryPolicy(delay=0.05))
    await asyncio.sleep(0.1)
    swept = await Sweeper(store, PopSettings(), EventSettings(), RecordingNotifier()).sweep()
    assert swept.promoted == 1
    state = await store.record_state(record.checksum)
    assert state is not None and state.where == "active"
