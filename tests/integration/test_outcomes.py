"""Writing outcomes when Redis loses a reply: an outcome already applied is never applied a second time to a
new claim of the same record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from dataq.config import QueueSettings
from dataq.errors import StoreUnavailable
from dataq.ops.notices import LogNotifier
from dataq.pop import outcomes as outcomes_module
from dataq.pop.outcomes import OutcomeWriter
from dataq.runtime.backoff import Backoff
from dataq.store import FailOutcome, QueueList, QueueStore, RetryPolicy, connect
from dataq.store.lifecycle import NO_DELAY
from testbed.waits import eventually
from tests.helpers import make_records

WORKER = "host:1:pop:abc"


class LosesTheFirstFailReply(QueueStore):
    """Applies every fail, but the reply of the first one never arrives (a connection reset)."""

    fail_calls = 0

    async def fail(self, worker: str, failures: Sequence[tuple[str, str]], *, max_errors: int,
                   retry: RetryPolicy = NO_DELAY, now: float | None = None) -> list[FailOutcome]:
        self.fail_calls += 1
        outcomes = await super().fail(worker, failures, max_errors=max_errors, retry=retry, now=now)
        if self.fail_calls == 1:
            raise StoreUnavailable("Redis is unavailable: reply lost (test)")
        return outcomes


class RetryWhenTold(Backoff):
    """The outcome writer's wait before it retries after an outage, held until the test lets it go (``go``): the test
    claims the record again first, whatever the machine's load (a retry after the usual few milliseconds could
    come first, and write the failure a second time)."""

    go = asyncio.Event()

    async def wait(self, stop: asyncio.Event | None = None) -> None:
        await self.go.wait()


@pytest.fixture
async def flaky(redis_url: str) -> AsyncIterator[LosesTheFirstFailReply]:
    store = LosesTheFirstFailReply(connect(redis_url), "transfer")
    yield store
    await store.close()


async def test_a_failure_whose_reply_was_lost_is_not_sent_again_once_the_record_is_claimed_again(
    flaky: LosesTheFirstFailReply, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outcomes_module, "Backoff", RetryWhenTold)
    RetryWhenTold.go = asyncio.Event()
    (record,) = make_records(1)
    await flaky.push_batch([record], source="t")
    await flaky.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
    assert [r.id for r in (await flaky.claim(WORKER, 1)).records] == [record.id]
    freed: list[str] = []
    outcomes = OutcomeWriter(flaky, WORKER, QueueSettings("transfer", max_errors=5), LogNotifier(), freed.extend)
    task = asyncio.create_task(outcomes.run())
    try:
        outcomes.failed(record, "boom")

        async def applied_but_unanswered() -> bool:
            return flaky.fail_calls == 1 and await flaky.r.llen(flaky.keys.active) == 1

        await eventually(applied_but_unanswered, timeout=5, what="the fail to be applied with its reply lost")
        # The record is runnable again, and this worker claims it before the outcome writer retries.
        assert [r.id for r in (await flaky.claim(WORKER, 1)).records] == [record.id]
        outcomes.claimed_again(record.id)
        RetryWhenTold.go.set()

        async def slot_freed() -> bool:
            return freed == [record.id]

        await eventually(slot_freed, timeout=5, what="the stale result to be dropped")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert flaky.fail_calls == 1, "the stale failure was sent again"
    assert await flaky.processing(WORKER) == [record.id], "the new claim must stay this worker's"
    state = await flaky.record_state(record.id)
    assert state is not None and state.errors == 1
    assert await flaky.list_records(QueueList.ACTIVE) == []
