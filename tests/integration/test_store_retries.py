"""Failed records against a real redis-server: retries back off by the queue's policy, and records that wait for
an unreachable destination keep their place and their error count."""

from __future__ import annotations

from dataq.config import QueueSettings
from dataq.store import FailOutcome, QueueList, QueueStore, RetryPolicy
from tests.helpers import make_records

WORKER = "host-1:100:a"
NOW = 1_800_000_000.0
NO_JITTER = dict(jitter=0.0)


async def claimed(store: QueueStore, count: int = 1) -> list[str]:
    records = make_records(count)
    await store.push_batch(records, source="t")
    await store.heartbeat(WORKER, {"role": "pop"}, {}, 10.0)
    claim = await store.claim(WORKER, count)
    return [record.id for record in claim.records]


async def due_in(store: QueueStore, record_id: str) -> float:
    """Seconds after NOW at which the delayed record falls due."""
    score = await store.r.zscore(store.keys.delayed, record_id)
    assert score is not None, "the record is not delayed"
    return round(score / 1000 - NOW, 3)


async def fail_again(store: QueueStore, record_id: str, policy: RetryPolicy) -> float:
    assert await store.fail(WORKER, [(record_id, "no")], max_errors=100, retry=policy, now=NOW) == [
        FailOutcome.DELAYED]
    wait = await due_in(store, record_id)
    assert await store.promote_due(now=NOW + wait) == 1
    assert (await store.claim(WORKER, 1)).records[0].id == record_id
    return wait


async def test_each_failure_of_a_record_doubles_its_wait_up_to_the_cap(store: QueueStore) -> None:
    (record_id,) = await claimed(store)
    policy = RetryPolicy(delay=10, backoff=2, max_delay=50, **NO_JITTER)
    waits = [await fail_again(store, record_id, policy) for _ in range(5)]
    assert waits == [10, 20, 40, 50, 50]


async def test_the_backoff_factor_is_the_queues(store: QueueStore) -> None:
    (record_id,) = await claimed(store)
    policy = RetryPolicy(delay=1, backoff=3, max_delay=3600, **NO_JITTER)
    assert [await fail_again(store, record_id, policy) for _ in range(3)] == [1, 3, 9]


async def test_a_record_that_failed_hundreds_of_times_waits_the_cap(store: QueueStore) -> None:
    (record_id,) = await claimed(store)
    await store.r.hset(store.keys.errors, record_id, 5000)
    policy = RetryPolicy(delay=1, backoff=2, max_delay=600, **NO_JITTER)
    assert await store.fail(WORKER, [(record_id, "no")], max_errors=10**6, retry=policy, now=NOW) == [
        FailOutcome.DELAYED]
    assert await due_in(store, record_id) == 600


async def test_jitter_shortens_each_wait_by_at_most_its_fraction(store: QueueStore) -> None:
    ids = await claimed(store, 200)
    policy = RetryPolicy(delay=100, backoff=2, max_delay=1000, jitter=0.2)
    await store.fail(WORKER, [(record_id, "no") for record_id in ids], max_errors=5, retry=policy, now=NOW)
    waits = {await due_in(store, record_id) for record_id in ids}
    assert all(80 <= wait <= 100 for wait in waits)
    assert len(waits) > 100, "records failed together must not fall due together"


async def test_without_a_retry_delay_a_failed_record_runs_again_at_once_but_last(store: QueueStore) -> None:
    records = make_records(2)
    await store.push_batch(records, source="t")
    await store.heartbeat(WORKER, {"role": "pop"}, {}, 10.0)
    first = (await store.claim(WORKER, 1)).records[0].id
    assert await store.fail(WORKER, [(first, "no")], max_errors=3, retry=RetryPolicy(backoff=5), now=NOW) == [
        FailOutcome.RETRY]
    assert [r.id for r in await store.list_records(QueueList.ACTIVE)] == [first, records[1].id]
    assert (await store.summary()).delayed == 0


async def test_a_postponed_record_goes_back_next_to_run_without_counting_a_failure(store: QueueStore) -> None:
    records = make_records(3)
    await store.push_batch(records, source="t")
    await store.heartbeat(WORKER, {"role": "pop"}, {}, 10.0)
    first = (await store.claim(WORKER, 1)).records[0]
    assert await store.postpone(WORKER, [(first.id, "network_move: connection refused")]) == [True]
    assert (await store.claim(WORKER, 1)).records[0].id == first.id, "it keeps its place at the head of the queue"
    state = await store.record_state(first.id)
    assert state is not None
    assert (state.errors, state.last_error) == (0, "network_move: connection refused")
    counters = await store.counters()
    assert counters.get("waiting") == 1 and "failed" not in counters
    assert [event.kind for event in await store.events(10) if event.record_id == first.id][-2:] == [
        "waiting", "claimed"]


async def test_postponed_records_keep_their_order_first_given_first_to_run(store: QueueStore) -> None:
    records = make_records(4)
    await store.push_batch(records, source="t")
    await store.heartbeat(WORKER, {"role": "pop"}, {}, 10.0)
    claim = await store.claim(WORKER, 3)
    order = [record.id for record in claim.records]
    assert await store.postpone(WORKER, [(record_id, "down") for record_id in order]) == [True, True, True]
    again = await store.claim(WORKER, 4)
    assert [record.id for record in again.records] == [*order, records[3].id]


async def test_postponing_a_record_the_worker_no_longer_holds_changes_nothing(store: QueueStore) -> None:
    (record_id,) = await claimed(store)
    await store.ack(WORKER, [(record_id, "")])
    assert await store.postpone(WORKER, [(record_id, "down")]) == [False]
    assert (await store.summary()).tracked == 0


def test_the_policy_comes_from_the_queue_settings() -> None:
    policy = RetryPolicy.of(QueueSettings("transfer", retry_delay=5, retry_backoff=3, retry_max_delay=60))
    assert (policy.delay, policy.backoff, policy.max_delay) == (5, 3, 60)
