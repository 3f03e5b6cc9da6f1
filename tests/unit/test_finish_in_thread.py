"""Work run under a lease ends before the lease goes, even when the caller is cancelled."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from dataq.actions.files import finish_in_thread


async def test_a_cancelled_caller_waits_for_the_thread_then_is_cancelled() -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[float] = []

    def work() -> str:
        started.set()
        release.wait(5)
        finished.append(time.monotonic())
        return "done"

    caller = asyncio.create_task(finish_in_thread(work))
    await asyncio.to_thread(started.wait, 5)
    caller.cancel()
    await asyncio.sleep(0.1)
    assert not caller.done()  # still inside whatever it holds (a lease) while the thread runs
    caller.cancel()  # a second cancellation does not cut it short either
    await asyncio.sleep(0.1)
    assert not caller.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert len(finished) == 1


async def test_the_result_and_errors_come_back_as_from_the_function() -> None:
    assert await finish_in_thread(sum, [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        await finish_in_thread(divmod, 1, 0)
