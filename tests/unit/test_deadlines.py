"""Action time limits: one watcher enforces many limits, on time, and never eats a cancellation it did not cause."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from dataq import deadlines as deadlines_module
from dataq.deadlines import Deadlines


async def guarded(deadlines: Deadlines, limit: float, work: float) -> str:
    """Sleep ``work`` seconds within a limit of ``limit`` seconds; say how it ended."""
    with deadlines.limit(limit) as armed:
        try:
            await asyncio.sleep(work)
        except asyncio.CancelledError:
            if not armed.timed_out():
                raise
            assert armed.task.cancelling() == 0, "the timeout's cancellation was not taken back"
            return "timed out"
    return "finished"


async def test_only_the_actions_past_their_limit_are_cancelled() -> None:
    deadlines = Deadlines()
    outcomes = await asyncio.gather(*(guarded(deadlines, 0.2, work) for work in (0.01, 0.1, 5, 5)))
    assert outcomes == ["finished", "finished", "timed out", "timed out"]


async def test_a_short_limit_armed_after_a_long_one_fires_on_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines_module, "MAX_NAP", 10.0)
    deadlines = Deadlines()
    long_one = asyncio.create_task(guarded(deadlines, 30, 1.5))
    await asyncio.sleep(0.05)  # the watcher now sleeps towards the long limit, or 10 s
    started = time.monotonic()
    assert await guarded(deadlines, 0.1, 5) == "timed out"
    assert 0.1 <= time.monotonic() - started < 1.0  # woken for it, not at its next look
    assert await long_one == "finished"


async def test_a_shutdown_cancellation_goes_through_even_when_the_limit_has_also_passed() -> None:
    deadlines = Deadlines()
    task = asyncio.create_task(guarded(deadlines, 0.05, 5))

    async def shut_down_as_the_limit_fires() -> None:
        # Cancel right after the watcher does, before the task has run again: both cancellations are pending.
        while task.cancelling() == 0:
            await asyncio.sleep(0)
        task.cancel()

    await shut_down_as_the_limit_fires()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError(f"the shutdown's cancellation was absorbed: {task.result()!r}")


async def test_a_cancellation_from_elsewhere_is_not_taken_for_a_timeout() -> None:
    deadlines = Deadlines()
    task = asyncio.create_task(guarded(deadlines, 10, 5))
    await asyncio.sleep(0.01)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("a cancellation from elsewhere was absorbed")


async def test_an_action_that_swallows_the_cancellation_leaves_its_task_uncancelled() -> None:
    deadlines = Deadlines()

    async def stubborn() -> int:
        with deadlines.limit(0.02), contextlib.suppress(asyncio.CancelledError):  # a badly behaved action
            await asyncio.sleep(5)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert await stubborn() == 0


async def test_the_watcher_runs_only_while_limits_are_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines_module, "MAX_NAP", 0.05)
    deadlines = Deadlines()
    watchers = lambda: [t for t in asyncio.all_tasks() if t.get_name() == "action time limits"]  # noqa: E731
    assert watchers() == []
    assert await guarded(deadlines, 0.05, 0.01) == "finished"
    await asyncio.sleep(0.5)  # well past its longest nap: it looks, finds nothing armed, and ends
    assert watchers() == []
    assert await guarded(deadlines, 0.05, 1) == "timed out"  # and a new limit starts it again
