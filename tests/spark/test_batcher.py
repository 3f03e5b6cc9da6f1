"""The micro-batcher: concurrent runs become batches cut by size or age, and each run gets its own outcome."""

from __future__ import annotations

import asyncio
import time

import pytest
from dataq.actions.batcher import MicroBatcher

pytestmark = pytest.mark.spark  # part of the archive_ingest suite; needs neither Spark nor Java


class Recorder:
    """A batch handler that records each batch and answers ``item * 10`` (or fails on a poisoned batch)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.delay = delay
        self.running = 0
        self.most_running = 0

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.delay)
            if -1 in items:
                raise RuntimeError("poisoned batch")
            return [item * 10 for item in items]
        finally:
            self.running -= 1


async def test_a_full_batch_is_cut_at_once_and_each_caller_gets_its_own_result() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=3, age=60.0)
    started = time.monotonic()
    assert await asyncio.gather(*(batcher.submit(n) for n in range(3))) == [0, 10, 20]
    assert time.monotonic() - started < 1.0
    assert handler.batches == [[0, 1, 2]]


async def test_a_partial_batch_is_cut_when_its_first_item_is_batch_age_old() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=100, age=0.3)
    started = time.monotonic()
    first = asyncio.create_task(batcher.submit(1))
    await asyncio.sleep(0.2)
    second = asyncio.create_task(batcher.submit(2))
    assert await asyncio.gather(first, second) == [10, 20]
    assert 0.25 <= time.monotonic() - started < 1.0  # counted from the first item, not the last
    assert handler.batches == [[1, 2]]


async def test_more_items_than_a_batch_make_several_batches_in_order() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=4, age=0.1)
    assert await asyncio.gather(*(batcher.submit(n) for n in range(10))) == [n * 10 for n in range(10)]
    assert handler.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_at_most_in_flight_batches_run_at_once() -> None:
    handler = Recorder(delay=0.2)
    batcher = MicroBatcher(handler, size=1, age=10.0, in_flight=2)
    await asyncio.gather(*(batcher.submit(n) for n in range(5)))
    assert handler.most_running == 2
    assert len(handler.batches) == 5


async def test_a_failing_batch_fails_its_own_callers_only() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=2, age=10.0)
    outcomes = await asyncio.gather(*(batcher.submit(n) for n in (1, -1, 3, 4)), return_exceptions=True)
    assert [type(o).__name__ if isinstance(o, BaseException) else o for o in outcomes] == \
        ["RuntimeError", "RuntimeError", 30, 40]


async def test_a_caller_cancelled_before_its_batch_runs_is_left_out_of_it() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=10, age=0.2)
    leaving = asyncio.create_task(batcher.submit(1))
    staying = asyncio.create_task(batcher.submit(2))
    await asyncio.sleep(0.05)
    leaving.cancel()
    assert await staying == 20
    assert handler.batches == [[2]]


async def test_drain_cuts_the_pending_batch_without_waiting_for_its_age() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=10, age=60.0)
    pending = asyncio.create_task(batcher.submit(5))
    await asyncio.sleep(0)
    started = time.monotonic()
    await batcher.drain()
    assert time.monotonic() - started < 1.0
    assert await pending == 50
