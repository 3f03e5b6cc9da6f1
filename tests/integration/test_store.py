"""The queue store against a real redis-server: each operation's contract."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from dataq.errors import InvalidRecord, RangeError, StoreUnavailable
from dataq.record import Record
from dataq.runtime.loop import loop_factory
from dataq.store import ClaimStatus, FailOutcome, Flag, QueueList, QueueStore, RetryPolicy
from tests.helpers import make_records, until_subscribed

WORKER = "host-1:100:a"
INFO = {"role": "pop", "host": "host-1", "pid": 100}


async def register(store: QueueStore, worker: str = WORKER, ttl: float = 10.0) -> None:
    await store.heartbeat(worker, INFO, {"running": 0}, ttl)


async def active_ids(store: QueueStore) -> list[str]:
    return [r.checksum for r in await store.list_records(QueueList.ACTIVE)]


async def inactive_ids(store: QueueStore) -> list[str]:
    return [r.checksum for r in await store.list_records(QueueList.INACTIVE)]


# --- push ---------------------------------------------------------------------------------------------------


async def test_push_stores_new_records_newest_first_and_reports_each(store: QueueStore) -> None:
    records = make_records(3)
    result = await store.push_batch(records, source="127.0.0.1:5000", now=1_700_000_000.5)
    assert result.pushed == [True, True, True]
    assert result.active_length == 3
    listed = await store.list_records(QueueList.ACTIVE)
    assert [r.checksum for r in listed] == [r.checksum for r in reversed(records)]
    assert listed[-1].path == records[0].path and listed[-1].size == records[0].size
    assert listed[-1].pushed_at == 1_700_000_000.5 and listed[-1].source == "127.0.0.1:5000"


async def test_push_ignores_an_id_already_tracked_anywhere(store: QueueStore) -> None:
    a, b, c, d = make_records(4)
    await store.push_batch([a, b, c], source="t")
    await register(store)
    claim = await store.claim(WORKER, 1)  # a is now in flight
    assert [r.checksum for r in claim.records] == [a.checksum]
    await store.deactivate(b.checksum, b.checksum)  # b is now inactive
    result = await store.push_batch([a, b, c, d, d], source="t")
    assert result.pushed == [False, False, False, True, False]
    assert (await store.summary()).tracked == 4
    assert (await store.counters())["duplicate"] == 4


async def test_a_batch_larger_than_a_script_chunk_stores_each_new_record_once_in_push_order(
    store: QueueStore,
) -> None:
    records = make_records(2500)
    early = records[1800:1810]
    await store.push_batch(early, source="early")
    result = await store.push_batch([*records, records[2400]], source="late")
    assert result.pushed == [not 1800 <= index < 1810 for index in range(2500)] + [False]
    listed = await store.list_records(QueueList.ACTIVE, limit=3000)
    late = [record for record in records if record not in early]
    assert [r.checksum for r in listed] == [r.checksum for r in reversed(late)] + [
        r.checksum for r in reversed(early)
    ]
    assert {r.source for r in listed[:2490]} == {"late"} and {r.source for r in listed[2490:]} == {"early"}
    assert (await store.counters())["duplicate"] == 11


async def test_an_empty_push_stores_nothing_and_reports_the_queue_length(store: QueueStore) -> None:
    await store.push_batch(make_records(2), source="t")
    result = await store.push_batch([], source="t")
    assert (result.pushed, result.active_length) == ([], 2)


async def test_a_path_with_a_newline_is_refused_before_anything_is_stored(store: QueueStore) -> None:
    good, bad = make_records(2)
    bad = Record(path="/data/two\nlines.fits", checksum=bad.checksum, size=1)
    with pytest.raises(InvalidRecord, match="newline"):
        await store.push_batch([good, bad], source="t")
    assert (await store.summary()).tracked == 0


@pytest.mark.parametrize("checksum", ["", "f45cc4c6\n47913bc6"], ids=["empty", "newline"])
async def test_an_empty_id_or_one_with_a_newline_is_refused_before_anything_is_stored(
    store: QueueStore, checksum: str
) -> None:
    (good,) = make_records(1)
    with pytest.raises(InvalidRecord, match="checksum"):
        await store.push_batch([good, Record(path="/data/x.fits", checksum=checksum, size=1)], source="t")
    assert (await store.summary()).tracked == 0


@pytest.mark.parametrize(
    ("ids", "values"),
    [("a\n", "v\n"), ("a\n\nb", "v\nw\nx"), ("a\nb", "v\n"), ("a", "")],
    ids=["trailing-newline", "doubled-newline", "empty-last-value", "no-value"],
)
async def test_the_push_script_refuses_an_empty_id_or_value_before_writing_anything(
    store: QueueStore, ids: str, values: str
) -> None:
    # The store never sends such arguments (encode_stored refuses what would make them); the script must not
    # store an empty id whoever calls it.
    k = store.keys
    keys = [k.records, k.active, k.events, k.counters]
    with pytest.raises(Exception, match=r"empty id or stored value|1 ids but 0 stored values"):
        await store._script("push_batch", keys, [100, 0, k.work, "w", ids, values])
    assert (await store.summary()).tracked == 0
    assert await store.counters() == {}


async def test_a_source_with_a_newline_or_nul_is_stored_cleaned(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="feeder\nname\0x")
    (listed,) = await store.list_records(QueueList.ACTIVE)
    assert listed.source == "feeder?name?x"


# --- claim --------------------------------------------------------------------------------------------------


async def test_claim_takes_the_oldest_records_first(store: QueueStore) -> None:
    records = make_records(5)
    await store.push_batch(records[:3], source="t")
    await store.push_batch(records[3:], source="t")
    await register(store)
    first = await store.claim(WORKER, 2)
    second = await store.claim(WORKER, 10)
    assert first.status is ClaimStatus.OK
    assert [r.checksum for r in first.records + second.records] == [r.checksum for r in records]
    assert await store.processing(WORKER) == [r.checksum for r in reversed(records)]
    assert (await store.claim(WORKER, 1)).records == []


async def test_a_claim_for_no_records_takes_none(store: QueueStore) -> None:
    await store.push_batch(make_records(3), source="t")
    await register(store)
    assert (await store.claim(WORKER, 0)).records == []
    assert (await store.summary()).active == 3


async def test_an_id_whose_record_is_gone_is_dropped_by_the_claim_and_counted(store: QueueStore) -> None:
    a, b, c = make_records(3)
    await store.push_batch([a, b, c], source="t")
    await register(store)
    await store.client.hdel(store.keys.records, b.checksum)  # as a hand edit or a half-restored dump would leave it
    claim = await store.claim(WORKER, 10)
    assert [r.checksum for r in claim.records] == [a.checksum, c.checksum]
    assert await store.processing(WORKER) == [c.checksum, a.checksum]
    assert (await store.counters())["orphaned"] == 1


async def test_a_value_written_by_hand_with_a_newline_does_not_break_the_claim_of_its_batch(store: QueueStore) -> None:
    a, b = make_records(2)
    await store.push_batch([a, b], source="t")
    await register(store)
    stored = await store.client.hget(store.keys.records, a.checksum)
    await store.client.hset(store.keys.records, a.checksum, stored.replace("\0t", "\0line\nbreak"))
    claim = await store.claim(WORKER, 10)
    assert [(r.checksum, r.path, r.source) for r in claim.records] == [
        (a.checksum, a.path, "line?break"), (b.checksum, b.path, "t")]


async def test_claim_takes_nothing_while_action_is_off(store: QueueStore) -> None:
    await store.push_batch(make_records(2), source="t")
    await register(store)
    await store.set_flag(Flag.ACTION, False)
    claim = await store.claim(WORKER, 10)
    assert claim.status is ClaimStatus.ACTION_OFF and claim.records == []
    assert (await store.summary()).active == 2
    await store.set_flag(Flag.ACTION, True)
    assert len((await store.claim(WORKER, 10)).records) == 2


async def test_claim_refuses_an_unregistered_worker(store: QueueStore) -> None:
    await store.push_batch(make_records(1), source="t")
    claim = await store.claim("ghost", 1)
    assert claim.status is ClaimStatus.UNREGISTERED
    assert (await store.summary()).active == 1


# --- ack and fail -------------------------------------------------------------------------------------------


async def test_ack_forgets_the_record_and_its_history(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    await register(store)
    await store.claim(WORKER, 1)
    await store.fail(WORKER, [(record.checksum, "boom")], max_errors=3)
    await store.claim(WORKER, 1)
    assert await store.ack(WORKER, [(record.checksum, "12ms")]) == [True]
    assert await store.record_state(record.checksum) is None
    summary = await store.summary()
    assert (summary.tracked, summary.active, summary.in_flight) == (0, 0, 0)
    assert (await store.events(1))[0].kind == "done"


async def test_a_batch_ack_settles_each_record_with_its_own_event_detail(store: QueueStore) -> None:
    records = make_records(4)
    await store.push_batch(records, source="t")
    await register(store)
    await store.claim(WORKER, 4)
    details = ["duration_ms=5", "", "two\nlines", "duration_ms=7"]
    ghost = "f" * 32  # never claimed: not owned
    done = [(r.checksum, d) for r, d in zip(records, details, strict=True)]
    assert await store.ack(WORKER, [done[0], (ghost, "x"), *done[1:]]) == [True, False, True, True, True]
    events = [e for e in await store.events(20) if e.kind == "done"]
    assert [(e.record_id, e.detail) for e in events] == [
        (records[0].checksum, "duration_ms=5"), (records[1].checksum, ""), (records[2].checksum, "two lines"),
        (records[3].checksum, "duration_ms=7")]
    summary = await store.summary()
    assert (summary.tracked, summary.in_flight, summary.counters["done"]) == (0, 0, 4)


async def test_ack_of_a_record_the_worker_no_longer_holds_changes_nothing(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    await register(store, ttl=0.05)
    await store.claim(WORKER, 1)
    await asyncio.sleep(0.1)
    assert await store.reclaim_dead(WORKER, max_crashes=3) is not None
    assert await store.ack(WORKER, [(record.checksum, "")]) == [False]
    assert await active_ids(store) == [record.checksum]


async def test_failed_record_goes_to_the_left_end_until_max_errors_is_exceeded(store: QueueStore) -> None:
    a, b = make_records(2)
    await store.push_batch([a, b], source="t")
    await register(store)
    for attempt in range(1, 4):
        claimed = await store.claim(WORKER, 1)
        assert [r.checksum for r in claimed.records] == [a.checksum if attempt % 2 else b.checksum]
        outcome = await store.fail(WORKER, [(claimed.records[0].checksum, f"err {attempt}")], max_errors=1)
        expected = FailOutcome.RETRY if attempt < 3 else FailOutcome.INACTIVE
        assert outcome == [expected]
    assert await inactive_ids(store) == [a.checksum]
    state = await store.record_state(a.checksum)
    assert state is not None and state.where == "inactive" and state.errors == 2 and state.last_error == "err 3"


async def test_max_errors_zero_means_the_first_failure_deactivates(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    await register(store)
    await store.claim(WORKER, 1)
    assert await store.fail(WORKER, [(record.checksum, "no")], max_errors=0) == [FailOutcome.INACTIVE]


async def test_retry_delay_parks_a_record_until_it_is_due(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    await register(store)
    await store.claim(WORKER, 1)
    assert await store.fail(WORKER, [(record.checksum, "later")], max_errors=5,
                            retry=RetryPolicy(delay=60)) == [FailOutcome.DELAYED]
    summary = await store.summary()
    assert (summary.delayed, summary.active, summary.in_flight) == (1, 0, 0)
    assert await store.promote_due() == 0
    assert await store.promote_due(now=10**10) == 1
    assert await active_ids(store) == [record.checksum]


# --- dead workers -------------------------------------------------------------------------------------------


async def test_a_dead_workers_records_return_to_the_next_to_run_end_in_claim_order(store: QueueStore) -> None:
    records = make_records(4)
    await store.push_batch(records, source="t")
    await register(store, ttl=0.05)
    await store.claim(WORKER, 3)
    await asyncio.sleep(0.1)
    assert await store.dead_workers() == [WORKER]
    reclaimed = await store.reclaim_dead(WORKER, max_crashes=3)
    assert reclaimed is not None and (reclaimed.returned, reclaimed.deactivated) == (3, 0)
    assert await active_ids(store) == [
        records[3].checksum,
        records[2].checksum,
        records[1].checksum,
        records[0].checksum,
    ]
    assert await store.dead_workers() == [] and await store.workers() == []
    assert (await store.record_state(records[0].checksum)).crashes == 1  # type: ignore[union-attr]


async def test_a_live_worker_is_never_reclaimed(store: QueueStore) -> None:
    await store.push_batch(make_records(1), source="t")
    await register(store)
    await store.claim(WORKER, 1)
    assert await store.reclaim_dead(WORKER, max_crashes=3) is None
    assert len(await store.processing(WORKER)) == 1


async def test_a_record_that_keeps_killing_workers_goes_inactive(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    for crash in range(1, 4):
        await register(store, ttl=0.02)
        await store.claim(WORKER, 1)
        await asyncio.sleep(0.05)
        reclaimed = await store.reclaim_dead(WORKER, max_crashes=2)
        assert reclaimed is not None
        assert (reclaimed.returned, reclaimed.deactivated) == ((1, 0) if crash <= 2 else (0, 1))
    state = await store.record_state(record.checksum)
    assert state is not None and state.where == "inactive" and "3 crashes" in (state.last_error or "")


async def test_release_gives_records_back_without_counting_a_crash(store: QueueStore) -> None:
    records = make_records(2)
    await store.push_batch(records, source="t")
    await register(store)
    await store.claim(WORKER, 2)
    assert (await store.release(WORKER)).returned == 2
    assert await active_ids(store) == [records[1].checksum, records[0].checksum]
    assert (await store.record_state(records[0].checksum)).crashes == 0  # type: ignore[union-attr]


async def test_heartbeat_registers_and_reports_a_swept_worker(store: QueueStore) -> None:
    assert await store.heartbeat(WORKER, INFO, {"done": 1}, ttl=5) is True
    assert await store.heartbeat(WORKER, INFO, {"done": 2}, ttl=5) is False
    (worker,) = await store.workers()
    assert worker.info == INFO and worker.heartbeat is not None and worker.heartbeat["done"] == 2
    await store.unregister(WORKER)
    assert await store.workers() == []


# --- range commands -----------------------------------------------------------------------------------------


@pytest.fixture
async def ten(store: QueueStore) -> list[str]:
    """Ten active records; returns their ids as listed (newest first)."""
    await store.push_batch(make_records(10), source="t")
    return await active_ids(store)


async def test_advance_moves_a_range_to_the_next_to_run_end_keeping_order(store: QueueStore, ten: list[str]) -> None:
    assert await store.advance(ten[2], ten[4]) == 3
    assert await active_ids(store) == ten[:2] + ten[5:] + ten[2:5]
    await register(store)
    assert [r.checksum for r in (await store.claim(WORKER, 3)).records] == [ten[4], ten[3], ten[2]]


async def test_deactivate_then_activate_round_trips_a_range(store: QueueStore, ten: list[str]) -> None:
    assert await store.deactivate(ten[0], ten[2]) == 3
    assert await inactive_ids(store) == ten[0:3]
    assert await store.activate(ten[1], ten[2]) == 2
    assert await inactive_ids(store) == [ten[0]]
    assert await active_ids(store) == ten[1:3] + ten[3:]


async def test_activate_resets_the_failure_count(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    await register(store)
    await store.claim(WORKER, 1)
    await store.fail(WORKER, [(record.checksum, "x")], max_errors=0)
    assert await store.activate(record.checksum, record.checksum) == 1
    state = await store.record_state(record.checksum)
    assert state is not None and (state.where, state.errors, state.last_error) == ("active", 0, None)


async def test_delete_forgets_a_range_of_either_list(store: QueueStore, ten: list[str]) -> None:
    await store.deactivate(ten[8], ten[9])
    assert await store.delete(QueueList.ACTIVE, ten[0], ten[1]) == 2
    assert await store.delete(QueueList.INACTIVE, ten[9], ten[9]) == 1
    assert await active_ids(store) == ten[2:8]
    assert await inactive_ids(store) == [ten[8]]
    assert (await store.summary()).tracked == 7


@pytest.mark.parametrize(
    ("first", "last", "message"),
    [
        (5, 2, "reversed range"),
        ("unknown", 2, "no record has this id"),
        (2, "inactive", "it is in the inactive queue"),
    ],
)
async def test_a_bad_range_is_refused_and_nothing_moves(
    store: QueueStore, ten: list[str], first: object, last: object, message: str
) -> None:
    await store.deactivate(ten[9], ten[9])

    def pick(x: object) -> str:
        return {"unknown": "f" * 32, "inactive": ten[9]}[x] if isinstance(x, str) else ten[x]  # type: ignore[index]

    with pytest.raises(RangeError, match=message):
        await store.advance(pick(first), pick(last))
    assert await active_ids(store) == ten[:9]


async def test_a_range_naming_an_in_flight_record_says_so(store: QueueStore, ten: list[str]) -> None:
    await register(store)
    await store.claim(WORKER, 1)
    with pytest.raises(RangeError, match="in flight"):
        await store.deactivate(ten[0], ten[9])


async def test_activate_all_moves_every_inactive_record_back_in_order(store: QueueStore, ten: list[str]) -> None:
    await store.deactivate(ten[0], ten[4])
    assert await store.activate_all() == 5
    assert await active_ids(store) == ten
    assert await inactive_ids(store) == []


# --- clear, summary, listing, events, flags -----------------------------------------------------------------


async def test_clear_forgets_everything_but_keeps_flags(store: QueueStore, ten: list[str]) -> None:
    await register(store)
    await store.claim(WORKER, 2)
    await store.deactivate(ten[0], ten[1])
    await store.set_flag(Flag.READ, False)
    assert await store.clear() == 10
    summary = await store.summary()
    assert (summary.tracked, summary.active, summary.inactive, summary.in_flight) == (0, 0, 0, 0)
    assert summary.read is False and summary.workers == 1
    assert await store.processing(WORKER) == []


async def test_summary_counts_every_place_a_record_can_be(store: QueueStore, ten: list[str]) -> None:
    await register(store)
    await store.claim(WORKER, 3)
    await store.deactivate(ten[0], ten[1])
    summary = await store.summary()
    assert (summary.active, summary.inactive, summary.in_flight, summary.tracked) == (5, 2, 3, 10)
    assert summary.action and summary.read and summary.workers == 1
    assert summary.counters["pushed"] == 10 and summary.counters["claimed"] == 3


async def test_list_pages_and_streams_in_queue_order(store: QueueStore, ten: list[str]) -> None:
    assert [r.checksum for r in await store.list_records(QueueList.ACTIVE, offset=3, limit=4)] == ten[3:7]
    assert await store.list_records(QueueList.ACTIVE, limit=0) == []
    streamed = [r.checksum async for r in store.iter_records(QueueList.ACTIVE, chunk=3)]
    assert streamed == ten
    everything = {r.checksum async for r in store.iter_records(None, chunk=3)}
    assert everything == set(ten)


async def test_events_record_what_happened_in_order(store: QueueStore) -> None:
    a, b, c = make_records(3)
    await store.push_batch([a, a, b], source="t")
    await store.push_batch([c], source="t")
    events = await store.events(10)
    # A batch's duplicates, then one event per record it pushed (stored as one entry for the whole batch).
    assert [(e.kind, e.record_id) for e in events] == [
        ("duplicate", a.checksum),
        ("pushed", a.checksum),
        ("pushed", b.checksum),
        ("pushed", c.checksum),
    ]
    assert events[1].event_id == events[2].event_id != events[3].event_id
    assert [e.record_id for e in await store.events(2)] == [b.checksum, c.checksum]
    later = await store.events_after(events[0].event_id)
    assert [(e.kind, e.record_id) for e in later] == [("pushed", a.checksum), ("pushed", b.checksum),
                                                      ("pushed", c.checksum)]
    assert [e.record_id for e in await store.events_after(later[-1].event_id)] == []
    # The pushed events carry the push time (µs): a retried push finds its own lost attempt by it.
    assert {e.detail for e in events if e.kind == "pushed"} == {str(round(r.pushed_at * 1_000_000))
                                                                 for r in await store.list_records(QueueList.ACTIVE)}


async def test_event_stream_is_trimmed_by_length_and_age(redis_url: str) -> None:
    store = QueueStore.from_url(redis_url, "small", events_max_len=100)
    try:
        # The cap counts stream entries: a batch of 1,000 is one, so push one record at a time.
        for record in make_records(1000):
            await store.push_batch([record], source="t")
        assert 100 <= await store.r.xlen(store.keys.events) < 400  # approximate trimming keeps whole nodes
        assert len(await store.events(10_000)) < 400
        await store.trim_events(max_age=-10)  # everything is older than "10 s in the future"
        assert len(await store.events(10_000)) < 200
    finally:
        await store.close()


async def test_flag_changes_are_published_at_once(store: QueueStore) -> None:
    received: list[str] = []

    async def listen() -> None:
        async for notice in store.notices():
            received.append(notice)
            if notice.startswith("flag:"):
                return

    listener = asyncio.create_task(listen())
    await until_subscribed(store, store.keys.notices)
    assert await store.set_flag(Flag.READ, False) is True
    await asyncio.wait_for(listener, 2)
    assert received[-1] == "flag:read:off"
    assert (await store.flags())[Flag.READ] is False


async def test_a_push_that_queues_records_tells_idle_workers_and_one_of_duplicates_does_not(
    store: QueueStore,
) -> None:
    everything: list[str] = []
    flags_only: list[str] = []

    async def listen(received: list[str], work: bool) -> None:
        async for notice in store.notices(work=work):
            received.append(notice)
            if notice.startswith("flag:"):
                return

    listeners = [asyncio.create_task(listen(everything, True)), asyncio.create_task(listen(flags_only, False))]
    await until_subscribed(store, store.keys.notices, 2)
    await until_subscribed(store, store.keys.work, 1)
    records = make_records(2)
    await store.push_batch(records, source="t")
    await store.push_batch(records, source="t")  # duplicates only: nothing new to claim
    await store.set_flag(Flag.READ, False)  # a notice that marks the end of what the pushes published
    await asyncio.wait_for(asyncio.gather(*listeners), 2)
    assert everything == ["work", "flag:read:off"]
    assert flags_only == ["flag:read:off"]  # what push daemons listen to: not every batch they write


async def test_activating_records_tells_idle_workers(store: QueueStore) -> None:
    received: list[str] = []

    async def listen() -> None:
        async for notice in store.notices(work=True):
            received.append(notice)
            if notice.startswith("flag:"):
                return

    a, b, c = make_records(3)
    await store.push_batch([a, b, c], source="t")
    await store.deactivate(c.checksum, a.checksum)  # as they stand in the list: newest on the left
    listener = asyncio.create_task(listen())
    await until_subscribed(store, store.keys.work)
    await store.activate(a.checksum, a.checksum)
    await store.activate_all()
    await store.activate_all()  # nothing left to activate: no notice
    await store.set_flag(Flag.READ, False)
    await asyncio.wait_for(listener, 2)
    assert received == ["work", "work", "flag:read:off"]


async def test_server_info_reports_version_and_persistence(store: QueueStore) -> None:
    info = await store.server_info()
    assert info["redis_version"] and info["aof_enabled"] == 1 and info["appendfsync"] == "always"


# --- failures of Redis itself -------------------------------------------------------------------------------


async def test_an_unreachable_redis_is_one_clear_error() -> None:
    from dataq.embedded.redis_server import free_port

    store = QueueStore.from_url(f"redis://127.0.0.1:{free_port()}", "transfer", socket_timeout=0.5)
    try:
        with pytest.raises(StoreUnavailable, match="unavailable"):
            await store.push_batch(make_records(1), source="t")
        with pytest.raises(StoreUnavailable):
            await store.summary()
        with pytest.raises(StoreUnavailable):
            async for _ in store.notices():
                pass
    finally:
        with contextlib.suppress(Exception):
            await store.close()


async def test_records_survive_a_redis_kill_and_restart(make_redis: object) -> None:
    server = make_redis()  # type: ignore[operator]
    store = QueueStore.from_url(server.url, "transfer")
    records: list[Record] = make_records(50)
    try:
        await store.push_batch(records, source="t")
        server.kill()
        with pytest.raises(StoreUnavailable):
            await store.summary()
        server.start()
        assert (await store.summary()).active == 50
    finally:
        await store.close()


async def test_a_retried_push_whose_first_try_landed_still_counts_as_pushed(store: QueueStore) -> None:
    records = make_records(2)
    await store.push_batch(records[:1], source="10.0.0.1:5", now=1000.0)
    again = await store.push_batch(records, source="10.0.0.1:5", now=1000.0)
    assert again.pushed == [True, True]
    other_source = await store.push_batch(records[:1], source="10.0.0.2:6", now=1000.0)
    assert other_source.pushed == [False]
    assert (await store.summary()).active == 2


async def test_a_retry_never_queues_again_what_its_lost_attempt_stored_and_a_worker_finished(store: QueueStore) -> None:
    record, second, waiting, other = make_records(4)
    lost = [(r, "10.0.0.1:5") for r in (record, second, waiting)]
    await store.push_records(lost, now=1000.5)  # its reply is "lost"; its batch is one event entry
    await register(store)
    await store.claim(WORKER, 2)
    assert await store.ack(WORKER, [(record.checksum, ""), (second.checksum, "")]) == [True, True]  # done already
    again = await store.push_records([*lost, (other, "10.0.0.1:5")], now=1000.5, retry=True)
    assert again.pushed == [True, True, True, True]
    assert await active_ids(store) == [other.checksum, waiting.checksum]
    # The same data sent anew (another push, another time) is a duplicate while done records are remembered.
    later = await store.push_records([(record, "10.0.0.1:5")], now=2000.0, retry=True)
    assert later.pushed == [False]
    assert await active_ids(store) == [other.checksum, waiting.checksum]


async def test_a_done_record_is_remembered_for_remember_done_seconds_then_is_new_work_again(redis_url: str) -> None:
    remember = 0.4
    store = QueueStore.from_url(redis_url, "remembering", remember_done=remember)
    try:
        await store.clear()
        record = make_records(1)[0]
        await store.push_batch([record], source="cli")
        await register(store)
        await store.claim(WORKER, 1)
        assert await store.ack(WORKER, [(record.checksum, "")]) == [True]
        assert (await store.push_batch([record], source="cli")).pushed == [False]
        # Remembered for at least remember_done, at most twice that.
        await asyncio.sleep(2 * remember + 0.1)
        assert (await store.push_batch([record], source="cli")).pushed == [True]
    finally:
        await store.close()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_command_on_a_connection_the_loop_already_closed_is_an_outage_then_the_next_reconnects(
    redis_url: str, loop: str
) -> None:
    """The event loop may close a pooled connection's transport (the server went away) before redis-py notices;
    uvloop, the daemons' loop, then raised RuntimeError from the write, and a Redis restart stopped the daemon."""
    factory = None if loop == "asyncio" else loop_factory()
    assert loop == "asyncio" or factory is not None, "uvloop is installed with dataq"

    async def scenario() -> None:
        store = QueueStore.from_url(redis_url, "closed")
        try:
            await store.summary()
            pool = store.r.connection_pool
            for connection in pool._available_connections:  # what the loop leaves when the server goes away
                connection._writer.transport.close()
            await asyncio.sleep(0.01)
            with pytest.raises(StoreUnavailable):
                await store.summary()
            assert (await store.summary()).tracked == 0
        finally:
            await store.close()

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(scenario())
