"""The pop daemon in this process against a real redis-server: writing, retries, the action flag, shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from dataq.actions import load_actions
from dataq.config import Settings
from dataq.errors import StoreUnavailable
from dataq.pop.daemon import EXIT_UNWRITTEN, PopDaemon
from dataq.store import Claim, Flag, QueueList, QueueStore, RecordState, connect
from testbed.actions import action_context
from testbed.waits import eventually, eventually_equal
from tests.conftest import MakeRedis
from tests.helpers import make_records, scrape, until_subscribed
from tests.pop_support import (
    FAIL_SOME,
    MARKER,
    NOWHERE,
    QUEUE,
    SELF_CANCELLING,
    RecordingNotifier,
    counter,
    executions,
    load,
    pop_daemon,
    runs_by_id,
    write_config,
)


def settings_for(tmp_path: Path, redis_url: str, **kw: object) -> Settings:
    return load(write_config(tmp_path, redis_url, **kw))  # type: ignore[arg-type]


async def state(store: QueueStore, record_id: str) -> RecordState:
    found = await store.record_state(record_id)
    assert found is not None, f"record {record_id} is not tracked"
    return found


async def ids_of(store: QueueStore, which: QueueList) -> list[str]:
    return [r.checksum for r in await store.list_records(which)]


async def test_every_record_is_run_once_and_acknowledged(store: QueueStore, redis_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    records = make_records(30)
    await store.push_batch(records, source="t")
    settings = settings_for(tmp_path, redis_url, actions=[MARKER], options={MARKER: {"dir": str(markers)}})
    async with pop_daemon(settings) as daemon:
        await eventually_equal(lambda: counter(store, "done"), 30, what="30 records done")
        assert await daemon.shut_down() == 0
    assert sorted(executions(markers)) == sorted(r.checksum for r in records)
    summary = await store.summary()
    assert (summary.tracked, summary.active, summary.in_flight, summary.workers) == (0, 0, 0, 0)
    done = [e for e in await store.events(200) if e.kind == "done"]
    assert len(done) == 30 and all(e.detail.startswith("duration_ms=") for e in done)


async def test_records_run_oldest_first_and_a_failed_one_goes_to_the_back(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    a, b, c = make_records(3)
    await store.push_batch([a, b, c], source="t")
    settings = settings_for(
        tmp_path, redis_url, actions=[FAIL_SOME], queue={"max_errors": 1},
        options={FAIL_SOME: {"dir": str(markers), "ids": [a.checksum]}},
    )
    async with pop_daemon(settings, concurrency=1):
        await eventually_equal(lambda: _length(store, QueueList.INACTIVE), 1, what="a to go inactive")
    assert executions(markers) == [a.checksum, b.checksum, c.checksum, a.checksum]


async def test_a_failing_record_is_retried_up_to_max_errors_then_goes_inactive_with_a_notice(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    settings = settings_for(tmp_path, redis_url, actions=["echo", "fail"], queue={"max_errors": 2},
                            options={"fail": {"message": "remote host down"}})
    notifier = RecordingNotifier()
    async with pop_daemon(settings, notifier=notifier):
        await eventually_equal(lambda: _length(store, QueueList.INACTIVE), 1, what="the record to go inactive")
        await eventually_equal(lambda: _count(notifier.notices), 1, what="the notice")
    found = await state(store, record.checksum)
    assert (found.where, found.errors, found.last_error) == ("inactive", 3, "fail: remote host down")
    assert await counter(store, "failed") == 3
    (kind, subject, details), = notifier.notices
    assert kind == "inactive" and "transfer" in subject
    assert details["records"] == [{"id": record.checksum, "path": record.path, "size": record.size,
                                   "last_error": "fail: remote host down"}]


async def test_max_errors_zero_means_no_retry(store: QueueStore, redis_url: str, tmp_path: Path) -> None:
    records = make_records(3)
    await store.push_batch(records, source="t")
    settings = settings_for(tmp_path, redis_url, actions=["fail"], queue={"max_errors": 0})
    async with pop_daemon(settings):
        await eventually_equal(lambda: _length(store, QueueList.INACTIVE), 3, what="3 records inactive")
        assert await counter(store, "failed") == 3
    assert [(await state(store, r.checksum)).errors for r in records] == [1, 1, 1]


async def test_a_retry_delay_holds_a_failed_record_back_until_it_is_due(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    settings = settings_for(tmp_path, redis_url, actions=["fail"], queue={"max_errors": 1, "retry_delay": 0.5})
    async with pop_daemon(settings):
        await eventually(lambda: _where(store, record.checksum, "delayed"), what="the record to be delayed")
        await eventually(lambda: _where(store, record.checksum, "inactive"), what="the retry, then inactive")
    assert (await state(store, record.checksum)).errors == 2


async def test_an_action_timeout_is_a_failure_that_names_the_action(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    settings = settings_for(tmp_path, redis_url, actions=["sleep:5"], options={"sleep": {"timeout": 0.2}})
    async with pop_daemon(settings):
        await eventually(lambda: _where(store, record.checksum, "inactive"), what="the record to time out")
    assert (await state(store, record.checksum)).last_error == "action sleep timed out after 0.2s"


async def test_action_off_while_idle_then_a_push_claims_nothing_until_action_is_on(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    settings = settings_for(tmp_path, redis_url, actions=["echo"])
    async with pop_daemon(settings):
        await until_subscribed(store, store.keys.work)  # the daemon found the queue empty and waits for a notice
        await store.set_flag(Flag.ACTION, False)
        await store.push_batch(make_records(5), source="t")  # publishes `work`: the daemon wakes and claims
        await asyncio.sleep(1.5)  # longer than the poll interval, so it has tried again too
        assert await counter(store, "claimed") == 0
        assert (await store.summary()).active == 5
        await store.set_flag(Flag.ACTION, True)
        await eventually_equal(lambda: counter(store, "done"), 5, what="5 records done once action is on")


async def test_action_off_while_records_run_lets_them_finish_and_claims_no_more(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    await store.push_batch(make_records(10), source="t")
    settings = settings_for(tmp_path, redis_url, actions=["sleep:0.5"])
    async with pop_daemon(settings, concurrency=4):
        await eventually_equal(lambda: _in_flight(store), 4, what="4 records running")
        await store.set_flag(Flag.ACTION, False)
        await eventually_equal(lambda: counter(store, "done"), 4, what="the 4 running records to finish")
        await asyncio.sleep(0.7)
        summary = await store.summary()
        assert (summary.active, summary.in_flight, summary.counters["claimed"]) == (6, 0, 4)
        await store.set_flag(Flag.ACTION, True)
        await eventually_equal(lambda: counter(store, "done"), 10, what="the rest once action is on")


async def test_stop_lets_running_actions_finish_within_the_grace_period(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    await store.push_batch(make_records(4), source="t")
    settings = settings_for(tmp_path, redis_url, actions=["sleep:0.5"], pop={"grace_period": 10.0})
    async with pop_daemon(settings, concurrency=4) as daemon:
        await eventually_equal(lambda: _in_flight(store), 4, what="4 records running")
        assert await daemon.shut_down() == 0
    summary = await store.summary()
    assert (summary.counters["done"], summary.tracked, summary.workers) == (4, 0, 0)


async def test_stop_cancels_actions_after_the_grace_period_and_puts_their_records_next_in_line(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    records = make_records(6)
    await store.push_batch(records, source="t")
    settings = settings_for(tmp_path, redis_url, actions=["sleep:30"], pop={"grace_period": 0.2})
    async with pop_daemon(settings, concurrency=4) as daemon:
        await eventually_equal(lambda: _in_flight(store), 4, what="4 records running")
        assert await daemon.shut_down() == 0
    summary = await store.summary()
    assert (summary.active, summary.in_flight, summary.workers, summary.counters.get("done", 0)) == (6, 0, 0, 0)
    # Next to run is the right end: the four that were running, oldest first, then the two never claimed.
    assert list(reversed(await ids_of(store, QueueList.ACTIVE))) == [r.checksum for r in records]
    assert [(await state(store, r.checksum)).errors for r in records] == [0] * 6


@pytest.mark.parametrize(("redis_back_after", "exit_status", "left_in_flight"), [
    pytest.param(1.0, 0, 0, id="redis-back-within-the-wait"),
    pytest.param(None, EXIT_UNWRITTEN, 4, id="redis-down-past-the-wait"),
])
async def test_a_stop_while_redis_is_down_retries_it_for_shutdown_redis_wait_and_loses_no_record(
    make_redis: MakeRedis, tmp_path: Path, redis_back_after: float | None, exit_status: int, left_in_flight: int
) -> None:
    server = make_redis()
    store = QueueStore.from_url(server.url, "transfer")
    try:
        await store.push_batch(make_records(4), source="t")
        # Back within the wait, Redis takes the cancelled records back; down past it, they stay where they were.
        wait = 30.0 if redis_back_after is not None else 0.5
        settings = settings_for(tmp_path, server.url, actions=["sleep:30"],
                                pop={"grace_period": 0.2, "shutdown_redis_wait": wait})
        async with pop_daemon(settings, concurrency=4) as daemon:
            await eventually_equal(lambda: _in_flight(store), 4, what="4 records running")
            server.stop()
            stopping = asyncio.create_task(daemon.shut_down())
            if redis_back_after is not None:
                await asyncio.sleep(redis_back_after)
                server.start()
            assert await stopping == exit_status
    finally:
        await store.close()
    if redis_back_after is None:
        server.start()
    store = QueueStore.from_url(server.url, "transfer")
    try:
        summary = await store.summary()
        # Nothing lost: given back to the queue, or left in the worker's processing list for a sweep.
        assert (summary.tracked, summary.in_flight, summary.active) == (4, left_in_flight, 4 - left_in_flight)
    finally:
        await store.close()


async def test_the_registry_shows_the_worker_with_its_counts(store: QueueStore, redis_url: str, tmp_path: Path) -> None:
    await store.push_batch(make_records(3), source="t")
    settings = settings_for(tmp_path, redis_url, actions=["echo"])
    async with pop_daemon(settings, concurrency=2) as daemon:
        await eventually_equal(lambda: counter(store, "done"), 3, what="3 records done")

        async def counted() -> bool:
            (worker,) = await store.workers()
            return worker.heartbeat is not None and worker.heartbeat["done"] == 3

        await eventually(counted, what="the heartbeat to count 3 done")
        (worker,) = await store.workers()
        assert worker.worker_id == daemon.worker_id
        assert {key: worker.info[key] for key in ("role", "queue", "concurrency")} == {
            "role": "pop", "queue": "transfer", "concurrency": 2}
        assert worker.heartbeat is not None
        assert {key: worker.heartbeat[key] for key in ("done", "failed", "running")} == {
            "done": 3, "failed": 0, "running": 0}
    assert await store.workers() == []


async def test_a_dead_workers_records_are_swept_back_and_run(store: QueueStore, redis_url: str, tmp_path: Path) -> None:
    records = make_records(3)
    await store.push_batch(records, source="t")
    await store.heartbeat("ghost:1:pop:x", {"role": "pop"}, {}, ttl=0.1)  # registers, then dies at once
    assert len((await store.claim("ghost:1:pop:x", 2)).records) == 2
    settings = settings_for(tmp_path, redis_url, actions=["echo"])
    async with pop_daemon(settings):
        await eventually_equal(lambda: counter(store, "done"), 3, what="all 3 records done")
    assert [(await store.record_state(r.checksum)) for r in records] == [None, None, None]
    assert await counter(store, "reclaimed") == 2


async def _count(items: Sequence[object]) -> int:
    return len(items)


async def _length(store: QueueStore, which: QueueList) -> int:
    summary = await store.summary()
    return summary.active if which is QueueList.ACTIVE else summary.inactive


async def _in_flight(store: QueueStore) -> int:
    return (await store.summary()).in_flight


async def _where(store: QueueStore, record_id: str, where: str) -> bool:
    found = await store.record_state(record_id)
    return found is not None and found.where == where


class LosesOneReply(QueueStore):
    """A real store whose named operation, once, runs in Redis and then fails as if the outage took its reply."""

    def __init__(self, url: str, lose: str) -> None:
        super().__init__(connect(url), QUEUE)
        self.lose = lose
        self.lost = False

    def _maybe_lose(self, operation: str, worked: bool) -> None:
        if operation == self.lose and worked and not self.lost:
            self.lost = True
            raise StoreUnavailable("Redis is unavailable: reply lost (test)")

    async def claim(self, worker: str, max_count: int) -> Claim:
        claim = await super().claim(worker, max_count)
        self._maybe_lose("claim", bool(claim.records))
        return claim

    async def ack(self, worker: str, done: Sequence[tuple[str, str]]) -> list[bool]:
        owned = await super().ack(worker, done)
        self._maybe_lose("ack", any(owned))
        return owned


@pytest.mark.parametrize("lose", ["claim", "ack"])
async def test_a_lost_reply_neither_strands_nor_repeats_a_record(
    store: QueueStore, redis_url: str, tmp_path: Path, lose: str
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    records = make_records(12)
    await store.push_batch(records, source="t")
    settings = settings_for(tmp_path, redis_url, actions=[MARKER], options={MARKER: {"dir": str(markers)}})
    flaky = LosesOneReply(redis_url, lose)
    try:
        actions = load_actions(action_context(settings.queue(QUEUE), store=flaky))
        daemon = PopDaemon(settings, settings.queue(QUEUE), flaky, actions)
        stop = asyncio.Event()
        task = asyncio.create_task(daemon.run(stop))
        await eventually_equal(lambda: counter(store, "done"), 12, what="every record done")
        stop.set()
        assert await task == 0
    finally:
        await flaky.close()
    assert flaky.lost
    assert runs_by_id(markers) == dict.fromkeys((r.checksum for r in records), 1)
    assert (await store.summary()).tracked == 0


class StalledOutcomes(QueueStore):
    """A real store whose acknowledgements wait until the test lets them through (Redis slow or unreachable)."""

    def __init__(self, url: str) -> None:
        super().__init__(connect(url), QUEUE)
        self.let_through = asyncio.Event()

    async def ack(self, worker: str, done: Sequence[tuple[str, str]]) -> list[bool]:
        await self.let_through.wait()
        return await super().ack(worker, done)


async def test_finished_records_free_their_slots_but_unwritten_outcomes_never_exceed_the_concurrency(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    await store.push_batch(make_records(10), source="t")
    settings = settings_for(tmp_path, redis_url, actions=["echo"], pop={"concurrency": 2})
    stalled = StalledOutcomes(redis_url)
    try:
        actions = load_actions(action_context(settings.queue(QUEUE), store=stalled))
        daemon = PopDaemon(settings, settings.queue(QUEUE), stalled, actions)
        stop = asyncio.Event()
        task = asyncio.create_task(daemon.run(stop))
        # Two ran and wait for their acknowledgement; their slots ran two more; then claiming stops.
        await eventually_equal(lambda: _in_flight(store), 4, what="4 records claimed")
        await asyncio.sleep(0.5)
        summary = await store.summary()
        assert (summary.in_flight, summary.active, summary.counters["claimed"]) == (4, 6, 4)
        assert daemon.worker.running == 0
        stalled.let_through.set()
        await eventually_equal(lambda: counter(store, "done"), 10, what="every record done once acks go through")
        stop.set()
        assert await task == 0
    finally:
        await stalled.close()
    assert (await store.summary()).tracked == 0


async def test_a_cancellation_from_inside_an_action_fails_the_record_instead_of_stranding_it(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="t")
    settings = settings_for(tmp_path, redis_url, actions=[SELF_CANCELLING])
    async with pop_daemon(settings):
        await eventually_equal(lambda: _length(store, QueueList.INACTIVE), 1, what="the record to go inactive")
    found = await state(store, record.id)
    assert found.where == "inactive" and "cancelled" in (found.last_error or "")


async def test_an_action_whose_destination_raises_still_succeeds_and_counts_its_bytes_under_its_name(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    records = make_records(5)
    await store.push_batch(records, source="t")
    settings = settings_for(tmp_path, redis_url, actions=[NOWHERE])
    async with pop_daemon(settings):
        await eventually_equal(lambda: counter(store, "done"), 5, what="5 records done")
        (url,) = [str(worker.info["metrics"]) for worker in await store.workers()]
        scraped = await asyncio.to_thread(scrape, url)
    assert scraped[f'dataq_action_bytes_total{{action="nowhere",destination="nowhere",queue="{QUEUE}"}}'] == sum(
        record.size for record in records)
