"""Activities in the store, against a real redis-server: which list a record waits in, the order claims serve
them in, and every operation on "the active list" keeping a record in its activity."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from dataq.activities import Activity, Plan
from dataq.errors import RangeError
from dataq.record import Record
from dataq.store import ClaimStatus, QueueList, QueueStore, RetryPolicy
from tests.helpers import make_records

WORKER = "host-1:100:a"
INFO = {"role": "pop", "host": "host-1", "pid": 100}
PLAN = Plan((Activity("express", 0, ("*/calib/*",)), Activity("science", 3, ("*.fits",)), Activity("default"),
             Activity("backfill", 1)))


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[QueueStore]:
    queue_store = QueueStore.from_url(redis_url, "transfer", plan=PLAN)
    await queue_store.heartbeat(WORKER, INFO, {"running": 0}, 30.0)
    yield queue_store
    await queue_store.close()


def of(activity: str | None, count: int, start: int, suffix: str = ".hdr") -> list[Record]:
    return [replace(r, path=r.path.replace(".hdr", suffix), activity=activity) for r in make_records(count, start)]


def calib(count: int, start: int) -> list[Record]:
    return [replace(r, path=r.path.replace("/mtn/", "/mtn/calib/")) for r in make_records(count, start)]


async def claimed_activities(store: QueueStore, count: int) -> list[str | None]:
    claim = await store.claim(WORKER, count)
    assert claim.status is ClaimStatus.OK
    await store.ack(WORKER, [(r.id, "") for r in claim.records])
    return [r.activity for r in claim.records]


async def test_a_record_is_queued_in_the_activity_named_else_the_first_whose_globs_fit_else_default(
        store: QueueStore) -> None:
    await store.push_batch([*of("backfill", 2, 0, ".fits"), *calib(1, 10), *of(None, 2, 20, ".fits"),
                            *of(None, 3, 30)], source="t")
    summary = await store.summary()
    assert summary.activities == {"express": 1, "science": 2, "default": 3, "backfill": 2}
    assert summary.active == 8
    listed = await store.list_records(QueueList.ACTIVE)
    assert [r.activity for r in listed] == ["express", "science", "science", "default", "default", "default",
                                            "backfill", "backfill"]


async def test_strict_activities_run_first_and_shares_interleave_by_weight(store: QueueStore) -> None:
    await store.push_batch([*of("backfill", 400, 0), *of(None, 300, 1000, ".fits")], source="t")
    await store.push_batch(calib(20, 5000), source="t")  # later, yet first to run
    first = await claimed_activities(store, 20)
    assert first == ["express"] * 20
    served = Counter(await claimed_activities(store, 200))
    assert served["science"] == 150 and served["backfill"] == 50
    # The credit persists between claims: one record at a time gives the same 3:1.
    one_by_one = Counter([activity for _ in range(80) for activity in await claimed_activities(store, 1)])
    assert one_by_one == {"science": 60, "backfill": 20}


async def test_a_share_alone_takes_every_claim_and_a_share_of_1_is_never_starved(store: QueueStore) -> None:
    await store.push_batch(of("backfill", 30, 0), source="t")
    assert await claimed_activities(store, 10) == ["backfill"] * 10
    await store.push_batch(of(None, 1000, 100, ".fits"), source="t")
    served = await claimed_activities(store, 12)
    # An activity that comes back starts level: no burst owed for the time it had nothing queued.
    assert Counter(served) == {"science": 9, "backfill": 3}
    assert "backfill" in served[:4]


async def test_records_put_back_go_back_to_their_own_activity(store: QueueStore) -> None:
    express, science = calib(1, 0)[0], of(None, 1, 10, ".fits")[0]
    await store.push_batch([express, science], source="t")
    claim = await store.claim(WORKER, 2)
    await store.fail(WORKER, [(express.id, "boom")], max_errors=5)
    await store.postpone(WORKER, [(science.id, "unreachable")])
    assert (await store.summary()).activities == {"express": 1, "science": 1, "default": 0, "backfill": 0}
    await store.claim(WORKER, 2)
    await store.fail(WORKER, [(express.id, "boom"), (science.id, "boom")], max_errors=5,
                     retry=RetryPolicy(delay=0.001, jitter=0))
    assert await store.promote_due(now=10**10) == 2
    assert (await store.summary()).activities == {"express": 1, "science": 1, "default": 0, "backfill": 0}
    await store.claim(WORKER, 2)
    await store.release(WORKER)
    assert (await store.summary()).activities == {"express": 1, "science": 1, "default": 0, "backfill": 0}
    await store.deactivate(express.id, express.id)
    await store.deactivate(science.id, science.id)
    assert await store.activate_all() == 2
    assert (await store.summary()).activities == {"express": 1, "science": 1, "default": 0, "backfill": 0}
    assert {r.id: r.activity for r in claim.records} == {express.id: "express", science.id: "science"}


async def test_a_range_lies_within_one_activity(store: QueueStore) -> None:
    science = of(None, 3, 0, ".fits")
    backfill = of("backfill", 2, 10)
    await store.push_batch([*science, *backfill], source="t")
    with pytest.raises(RangeError, match=r"queued in activity science and .* in activity backfill"):
        await store.advance(science[0].id, backfill[1].id)
    assert await store.advance(science[2].id, science[1].id) == 2
    assert await store.deactivate(backfill[1].id, backfill[0].id) == 2
    assert await store.activate(backfill[1].id, backfill[0].id) == 2
    assert (await store.summary()).activities == {"express": 0, "science": 3, "default": 0, "backfill": 2}
    order = [r.id for r in await store.list_records(QueueList.ACTIVE)]
    assert order == [science[0].id, science[2].id, science[1].id, backfill[1].id, backfill[0].id]


async def test_each_activity_counts_its_done_records(store: QueueStore) -> None:
    await store.push_batch([*calib(2, 0), *of("backfill", 3, 10)], source="t")
    await claimed_activities(store, 5)
    counters = await store.counters()
    assert (counters["done@express"], counters["done@backfill"], counters["done"]) == (2, 3, 5)


async def test_the_records_of_an_activity_the_settings_lost_are_adopted_by_default(redis_url: str,
                                                                                   store: QueueStore) -> None:
    await store.push_batch([*of("backfill", 3, 0), *of(None, 1, 10)], source="t")
    narrower = QueueStore.from_url(redis_url, "transfer", plan=Plan())
    try:
        summary = await narrower.summary()
        assert summary.activities == {"default": 1, "backfill": 3}
        assert await narrower.adopt_unserved() == 3
        assert (await narrower.summary()).activities == {}
        claim = await narrower.claim(WORKER, 10)
        # The records that waited in default's list run first; the adopted ones follow in their order.
        assert [r.id for r in claim.records] == [of(None, 1, 10)[0].id, *(r.id for r in of("backfill", 3, 0))]
    finally:
        await narrower.close()


async def test_a_queue_without_activities_lists_as_it_always_did(redis_url: str) -> None:
    plain = QueueStore.from_url(redis_url, "plain")
    try:
        records = make_records(3)
        await plain.push_batch(records, source="t")
        listed = await plain.list_records(QueueList.ACTIVE)
        assert [r.activity for r in listed] == [None, None, None]
        assert (await plain.summary()).activities == {}
        assert "done@default" not in await plain.counters()
    finally:
        await plain.close()


async def test_a_record_put_back_into_an_adopted_list_by_older_settings_is_adopted_again(
        redis_url: str, store: QueueStore) -> None:
    (late,) = of("backfill", 1, 0)
    await store.push_batch([late], source="t")
    await store.claim(WORKER, 1)  # in flight at a daemon still on the settings with backfill
    narrower = QueueStore.from_url(redis_url, "transfer", plan=Plan())
    try:
        assert await narrower.adopt_unserved() == 0  # its list is empty now
        await store.release(WORKER)  # the older daemon stops, giving the record back to backfill's list
        assert (await narrower.summary()).activities == {"default": 0, "backfill": 1}
        assert await narrower.adopt_unserved() == 1
        assert [r.id for r in (await narrower.claim(WORKER, 1)).records] == [late.id]
    finally:
        await narrower.close()
