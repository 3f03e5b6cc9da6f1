"""The rates ring: every script that moves records counts them per 10-second bucket of the server's clock, so
the last minute (``--summary``, the metrics) and the last hour (rate plots) read in constant time."""

from __future__ import annotations

from dataq.store import RATE_KINDS, QueueStore
from dataq.store.rate_ring import COUNTS, RATE_BUCKET_SECONDS, RATE_SLOTS
from dataq.store.rates import HISTORY_SECONDS
from tests.helpers import make_records

WORKER = "host-1:4242:pop:abc123"


async def current_slot(store: QueueStore) -> tuple[int, int]:
    seconds, _ = await store.r.time()
    bucket = int(seconds) // RATE_BUCKET_SECONDS
    return bucket, bucket % RATE_SLOTS


async def test_pushes_duplicates_acks_and_failures_are_counted_in_the_current_bucket(store: QueueStore) -> None:
    records = make_records(10)
    await store.push_batch([*records, records[0]], "test")  # one duplicate
    await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
    claim = await store.claim(WORKER, 5)
    await store.ack(WORKER, [(record.id, "ok") for record in claim.records[:3]])
    await store.fail(WORKER, [(record.id, "boom") for record in claim.records[3:]], max_errors=0)

    history = await store.rate_history(30)
    counts, _, complete = history.totals(30)
    done_bytes = sum(record.size for record in claim.records[:3])
    assert counts == {"pushed": 10, "duplicate": 1, "done": 3, "failed": 2, "done_bytes": done_bytes}
    assert complete and history.since == 0  # a new queue: the ring counted it from its first record
    day = await store.day_history()
    assert day.bucket_seconds == 300 and len(day.buckets) == 288
    assert day.totals(600)[0] == counts, "the day's ring counts the same, in buckets of 5 minutes"
    # The monotonic totals are kept by the same call, so they can never disagree with the ring.
    assert await store.counters() == {"pushed": 10, "duplicate": 1, "done": 3, "failed": 2, "claimed": 5,
                                      "deactivated": 2}


async def test_the_history_is_an_hour_of_consecutive_buckets_ending_with_the_current_one(store: QueueStore) -> None:
    await store.push_batch(make_records(3), "test")
    history = await store.rate_history()
    bucket, _ = await current_slot(store)
    assert len(history.buckets) == RATE_SLOTS == HISTORY_SECONDS // RATE_BUCKET_SECONDS
    starts = [b.start for b in history.buckets]
    assert starts == [float((bucket - RATE_SLOTS + 1 + i) * RATE_BUCKET_SECONDS) for i in range(RATE_SLOTS)]
    assert history.buckets[-1].counts["pushed"] == 3
    assert sum(b.counts["pushed"] for b in history.buckets[:-1]) == 0
    assert starts[-1] <= history.now < starts[-1] + RATE_BUCKET_SECONDS


async def test_a_slot_left_from_an_hour_ago_counts_nothing_now_and_is_emptied_when_reused(store: QueueStore) -> None:
    bucket, _ = await current_slot(store)
    # Stale counts in this bucket's slot and the next one's, so the push lands on one even if the clock moves on.
    stale_buckets = (bucket, bucket + 1)
    stale: dict[str, int] = {"since": 0}
    for fresh in stale_buckets:
        slot = fresh % RATE_SLOTS
        stale |= {f"t:{slot}": fresh - RATE_SLOTS, **{f"{kind}:{slot}": 500 for kind in RATE_KINDS}}
    await store.r.hset(store.keys.rates, mapping=stale)
    stale_read = await store.rate_history(10)
    assert stale_read.totals(10)[0] == dict.fromkeys(COUNTS, 0)
    assert stale_read.buckets[-1].levels == {"backlog_age": None}, "a stale sample stands for nothing"

    await store.push_batch(make_records(2), "test")
    ring = await store.r.hgetall(store.keys.rates)
    reused = [fresh for fresh in stale_buckets if ring[f"t:{fresh % RATE_SLOTS}"] == str(fresh)]
    assert len(reused) == 1
    slot = reused[0] % RATE_SLOTS
    assert {kind: ring.get(f"{kind}:{slot}") for kind in RATE_KINDS} == {
        "pushed": "2", "duplicate": None, "done": None, "failed": None, "done_bytes": None, "backlog_age": None}


async def test_a_queue_older_than_its_ring_says_the_rates_cover_only_since_the_ring_began(store: QueueStore) -> None:
    await store.r.hset(store.keys.counters, mapping={"pushed": 100, "done": 90})  # counted before the ring existed
    await store.push_batch(make_records(4), "test")
    history = await store.rate_history(60)
    counts, covered, complete = history.totals(60)
    assert counts["pushed"] == 4
    assert not complete and 0 < history.since <= history.now and covered < 2


async def test_the_ring_is_bounded_whatever_the_traffic(store: QueueStore) -> None:
    for start in range(0, 5000, 500):
        await store.push_batch(make_records(500, start=start), "test")
    # One bucket in use: its stamp, one field per kind counted, and 'since'.
    assert await store.r.hlen(store.keys.rates) <= 1 + 1 + len(RATE_KINDS)


async def test_the_age_of_the_next_record_is_a_sample_that_the_last_note_of_a_bucket_stands_for(
        store: QueueStore) -> None:
    await store.note_backlog_age(40.4)
    await store.note_backlog_age(12.0)
    hour, day = await store.rate_history(10), await store.day_history()
    assert hour.buckets[-1].levels == day.buckets[-1].levels == {"backlog_age": 12}
    assert "backlog_age" not in hour.totals(10)[0], "a level is not added up"
