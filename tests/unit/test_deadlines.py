"""Action time limits: one watcher enforces many limits, on time, and never eats a cancellation it did not cause."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from dataq.pop import deadlines as deadlines_module
from dataq.pop.deadlines import Deadlines

FOREVER = 3600.0
"""Work that never ends by itself within a test: only a limit (or a cancellation) ends it."""


async def guarded(deadlines: Deadlines, limit: float, work: float, entered: asyncio.Event | None = None) -> str:
    """Sleep ``work`` seconds within a limit of ``limit`` seconds; say how it ended."""
    with deadlines.limit(limit) as armed:
        if entered is not None:
            entered.set()
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
    outcomes = await asyncio.gather(*(guarded(deadlines, 0.5, work) for work in (0, 0, FOREVER, FOREVER)))
    assert outcomes == ["finished", "finished", "timed out", "timed out"]


async def test_a_limit_fires_after_its_deadline_even_when_the_watcher_meant_to_sleep_for_an_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deadlines_module, "MAX_NAP", FOREVER)
    deadlines = Deadlines()
    watching = asyncio.Event()
    long_one = asyncio.create_task(guarded(deadlines, FOREVER, FOREVER, watching))
    await watching.wait()
    await asyncio.sleep(0)  # the watcher now sleeps towards the long limit: an hour
    loop = asyncio.get_running_loop()
    started = loop.time()
    # Were the watcher not woken for the short limit, this would wait an hour (and the test time out).
    assert await guarded(deadlines, 0.05, FOREVER) == "timed out"
    assert loop.time() - started >= 0.05  # not before its deadline
    assert not long_one.done()
    long_one.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await long_one


async def test_a_shutdown_cancellation_goes_through_even_when_the_limit_has_also_passed() -> None:
    deadlines = Deadlines()
    task = asyncio.create_task(guarded(deadlines, 0.05, FOREVER))

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
    entered = asyncio.Event()
    task = asyncio.create_task(guarded(deadlines, FOREVER, FOREVER, entered))
    await entered.wait()
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
            await asyncio.sleep(FOREVER)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert await stubborn() == 0


async def test_an_action_running_on_past_its_limit_is_overdue() -> None:
    deadlines = Deadlines()
    stuck = asyncio.Event()
    release = asyncio.Event()

    async def ignores_cancellation() -> None:
        with deadlines.limit(0.2):
            stuck.set()
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await release.wait()

    task = asyncio.create_task(ignores_cancellation())
    await stuck.wait()
    assert not deadlines.overdue(grace=0.3)
    while not deadlines.overdue(grace=0.3):  # its limit passes, the watcher cancels it, and it runs on
        await asyncio.sleep(0.01)
    release.set()
    await task
    assert not deadlines.overdue(grace=0.0)


def watcher() -> asyncio.Task[object] | None:
    return next((t for t in asyncio.all_tasks() if t.get_name() == "action time limits"), None)


async def test_the_watcher_runs_only_while_limits_are_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines_module, "MAX_NAP", 0.05)
    deadlines = Deadlines()
    assert watcher() is None
    assert await guarded(deadlines, 0.05, 0) == "finished"
    running = watcher()
    assert running is not None
    await asyncio.wait_for(running, 5)  # at its next look it finds nothing armed, and ends by itself
    assert watcher() is None
    assert await guarded(deadlines, 0.05, FOREVER) == "timed out"  # and a new limit starts it again
