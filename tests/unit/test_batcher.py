"""The micro-batcher: concurrent runs become batches cut by size or age, and each run gets its own outcome."""

from __future__ import annotations

import asyncio

import pytest

from dataq.actions.batcher import MicroBatcher

NEVER = 3600.0
"""A batch age no test waits for: were a batch not cut otherwise, the test would time out."""


class Recorder:
    """A batch handler that records each batch and answers ``item * 10`` (or fails on a poisoned batch); while
    ``hold`` is set, each batch waits for ``release``."""

    def __init__(self, hold: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.running = 0
        self.most_running = 0
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.release.wait()
            if -1 in items:
                raise RuntimeError("poisoned batch")
            return [item * 10 for item in items]
        finally:
            self.running -= 1


async def settle() -> None:
    """Let every task that can run do so."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_full_batch_is_cut_at_once_and_each_caller_gets_its_own_result() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=3, age=NEVER)
    assert await asyncio.gather(*(batcher.submit(n) for n in range(3))) == [0, 10, 20]
    assert handler.batches == [[0, 1, 2]]


async def test_a_partial_batch_is_cut_batch_age_after_its_first_item_not_its_last() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=100, age=0.3)
    loop = asyncio.get_running_loop()
    assert batcher.cut_at is None
    first = asyncio.create_task(batcher.submit(1))
    await settle()
    assert batcher.cut_at is not None
    cut_at = batcher.cut_at
    second = asyncio.create_task(batcher.submit(2))
    await settle()
    assert batcher.cut_at == cut_at  # a later item does not put the cut off
    assert await asyncio.gather(first, second) == [10, 20]
    assert loop.time() >= cut_at
    assert handler.batches == [[1, 2]]
    assert batcher.cut_at is None


async def test_more_items_than_a_batch_make_several_batches_in_order() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=4, age=0.1)
    assert await asyncio.gather(*(batcher.submit(n) for n in range(10))) == [n * 10 for n in range(10)]
    assert handler.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_at_most_in_flight_batches_run_at_once() -> None:
    handler = Recorder(hold=True)
    batcher = MicroBatcher(handler, size=1, age=NEVER, in_flight=2)
    results = asyncio.gather(*(batcher.submit(n) for n in range(5)))
    await settle()
    assert (handler.running, len(handler.batches)) == (2, 2)
    handler.release.set()
    assert await results == [0, 10, 20, 30, 40]
    assert handler.most_running == 2 and len(handler.batches) == 5


async def test_a_failing_batch_fails_its_own_callers_only() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=2, age=NEVER)
    outcomes = await asyncio.gather(*(batcher.submit(n) for n in (1, -1, 3, 4)), return_exceptions=True)
    assert [type(o).__name__ if isinstance(o, BaseException) else o for o in outcomes] == \
        ["RuntimeError", "RuntimeError", 30, 40]


async def test_a_caller_cancelled_before_its_batch_runs_is_left_out_of_it() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=10, age=NEVER)
    leaving = asyncio.create_task(batcher.submit(1))
    staying = asyncio.create_task(batcher.submit(2))
    await settle()
    leaving.cancel()
    await settle()
    batcher.flush()
    assert await staying == 20
    assert handler.batches == [[2]]


async def test_drain_cuts_the_pending_batch_without_waiting_for_its_age() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=10, age=NEVER)
    pending = asyncio.create_task(batcher.submit(5))
    await settle()
    await batcher.drain()
    assert await pending == 50


@pytest.mark.parametrize(("in_flight", "patience", "why"), [
    (1, 0.0, "past its age, but no slot is free: it keeps gathering"),
    (2, NEVER, "with patience, a slot is free but a batch runs: the next one gathers until it ends"),
])
async def test_a_batch_due_by_age_while_another_runs_gathers_until_it_ends(
        in_flight: int, patience: float, why: str) -> None:
    handler = Recorder(hold=True)
    batcher = MicroBatcher(handler, size=100, age=0.0, in_flight=in_flight, patience=patience)
    first = asyncio.create_task(batcher.submit(1))
    await settle()
    assert handler.batches == [[1]], "nothing running: cut at the next turn of the loop"
    later = [asyncio.create_task(batcher.submit(n)) for n in (2, 3, 4)]
    await asyncio.sleep(0.05)
    assert handler.batches == [[1]], why
    handler.release.set()
    assert await asyncio.gather(first, *later) == [10, 20, 30, 40]
    assert handler.batches == [[1], [2, 3, 4]]


class Gates:
    """A batch handler whose batches each wait for their own release (``open(n)``: the n-th batch's)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gates: list[asyncio.Event] = []

    def open(self, batch: int) -> None:
        self.gates[batch].set()

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return [item * 10 for item in items]


async def test_with_patience_a_due_batch_waits_for_every_running_batch_not_the_first_to_end() -> None:
    handler = Gates()
    batcher = MicroBatcher(handler, size=3, age=0.0, in_flight=3, patience=NEVER)
    full = [asyncio.create_task(batcher.submit(n)) for n in range(1, 7)]
    await settle()
    assert handler.batches == [[1, 2, 3], [4, 5, 6]], "full batches are cut at once"
    gathering = [asyncio.create_task(batcher.submit(7))]
    await settle()
    handler.open(0)
    await settle()
    assert handler.batches == [[1, 2, 3], [4, 5, 6]], "a slot is free, but one batch still runs: it gathers on"
    gathering.append(asyncio.create_task(batcher.submit(8)))
    await settle()
    handler.open(1)
    await settle()
    assert handler.batches == [[1, 2, 3], [4, 5, 6], [7, 8]], "cut once nothing runs"
    handler.open(2)
    assert await asyncio.gather(*full, *gathering) == [10, 20, 30, 40, 50, 60, 70, 80]


async def test_a_batch_is_cut_once_its_items_weigh_max_weight() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=100, age=0.01, weight=lambda item: item, max_weight=10)
    assert await asyncio.gather(*(batcher.submit(n) for n in (4, 5, 6, 20, 1))) == [40, 50, 60, 200, 10]
    assert handler.batches == [[4, 5, 6], [20], [1]], "cut on reaching the weight; one heavy item alone"


async def test_a_running_batch_whose_callers_all_gave_up_is_cancelled() -> None:
    handler = Recorder(hold=True)
    batcher = MicroBatcher(handler, size=2, age=NEVER)
    callers = [asyncio.create_task(batcher.submit(n)) for n in (1, 2)]
    await settle()
    assert handler.running == 1
    callers[0].cancel()
    await settle()
    assert handler.running == 1, "one caller still waits for the batch"
    callers[1].cancel()
    await settle()
    assert handler.running == 0, "the handler was cancelled with its last caller"
    await batcher.drain()


async def test_close_stops_batches_still_running_after_the_grace_period() -> None:
    handler = Recorder(hold=True)
    batcher = MicroBatcher(handler, size=1, age=NEVER)
    caller = asyncio.create_task(batcher.submit(1))
    await settle()
    assert await batcher.close(0.05) is False
    assert handler.running == 0
    assert caller.cancelled() or isinstance(await asyncio.gather(caller, return_exceptions=True)[0],
                                            asyncio.CancelledError)


async def test_close_waits_for_batches_that_finish_within_the_grace_period() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=10, age=NEVER)
    caller = asyncio.create_task(batcher.submit(3))
    await settle()
    assert await batcher.close(5.0) is True
    assert await caller == 30


async def test_patience_runs_out_while_a_long_batch_still_runs() -> None:
    handler = Recorder(hold=True)
    batcher = MicroBatcher(handler, size=100, age=0.0, in_flight=2, patience=0.1)
    first = asyncio.create_task(batcher.submit(1))
    await settle()
    second = asyncio.create_task(batcher.submit(2))
    await asyncio.sleep(0.05)
    assert handler.batches == [[1]]
    await asyncio.sleep(0.15)
    assert handler.batches == [[1], [2]], "the free slot takes it once patience has run out"
    handler.release.set()
    assert await asyncio.gather(first, second) == [10, 20]


async def test_once_close_gives_up_no_batch_starts_and_waiting_callers_are_cancelled() -> None:
    handler = Recorder(hold=True)
    batcher = MicroBatcher(handler, size=100, age=0.0, in_flight=2, patience=NEVER)
    running = asyncio.create_task(batcher.submit(1))
    await settle()
    closing = asyncio.create_task(batcher.close(grace=0.1))
    await settle()
    waiting = asyncio.create_task(batcher.submit(2))  # comes during the grace; gathers while the first runs
    assert await closing is False
    await settle()
    assert handler.batches == [[1]], "nothing started after close gave up"
    assert running.cancelled() and waiting.cancelled()
    late = asyncio.create_task(batcher.submit(3))
    await asyncio.sleep(0.01)
    assert late.cancelled() and handler.batches == [[1]]


async def test_an_item_that_comes_while_items_stream_gathers_the_stream() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=100, age=0.0, stream_gap=NEVER, stream_age=NEVER)
    assert await batcher.submit(1) == 10, "the first item comes alone: it waits only age"
    second = asyncio.create_task(batcher.submit(2))
    await settle()
    third = asyncio.create_task(batcher.submit(3))
    await settle()
    assert handler.batches == [[1]]
    assert batcher.cut_at is not None and batcher.cut_at > asyncio.get_running_loop().time() + NEVER / 2, \
        "it came right after another: it gathers the others of the stream"
    batcher.flush()
    assert await asyncio.gather(second, third) == [20, 30]
    assert handler.batches == [[1], [2, 3]]


async def test_a_batch_gathering_a_stream_is_cut_once_the_stream_pauses() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=100, age=0.0, stream_gap=2.0, stream_age=NEVER)
    assert await batcher.submit(1) == 10
    second = asyncio.create_task(batcher.submit(2))
    await asyncio.sleep(0.3)
    third = asyncio.create_task(batcher.submit(3))  # within the gap: the batch goes on gathering
    await asyncio.sleep(0.3)
    assert handler.batches == [[1]]
    assert await asyncio.wait_for(asyncio.gather(second, third), 30) == [20, 30]
    assert handler.batches == [[1], [2, 3]], "cut a gap after its last item, long before stream_age"


async def test_a_stream_that_goes_on_is_cut_at_stream_age() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=100, age=0.0, stream_gap=NEVER, stream_age=0.3)
    assert await batcher.submit(1) == 10
    loop = asyncio.get_running_loop()
    before = loop.time()
    second = asyncio.create_task(batcher.submit(2))
    await settle()
    assert batcher.cut_at is not None and before + 0.3 <= batcher.cut_at < before + NEVER / 2
    assert await asyncio.wait_for(second, 30) == 20


async def test_an_item_that_comes_after_a_pause_longer_than_stream_gap_waits_only_age() -> None:
    handler = Recorder()
    batcher = MicroBatcher(handler, size=100, age=0.05, stream_gap=0.3, stream_age=NEVER)
    loop = asyncio.get_running_loop()
    assert await batcher.submit(1) == 10
    await asyncio.sleep(0.5)
    before = loop.time()
    second = asyncio.create_task(batcher.submit(2))
    await settle()
    assert batcher.cut_at is not None and batcher.cut_at - before < 0.3
    assert await second == 20
    assert handler.batches == [[1], [2]]
