"""Time limits for many concurrent actions, enforced by one watcher task instead of one timer per action.

Arming and disarming an ``asyncio.timeout`` for every action took a tenth of the pop daemon's CPU at 20,000
records/s. Here arming a limit adds it to a set; one watcher task (as in dramatiq's ``TimeLimit`` middleware)
sleeps until the earliest deadline, or at most :data:`MAX_NAP`, and cancels the tasks whose limit has passed. It
is woken early only by a limit that ends before its next look, and it runs only while limits are armed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterator
from contextlib import contextmanager

MAX_NAP = 0.5
"""Longest pause between two looks at the limits, in seconds (a limit may be disarmed and another armed meanwhile,
so the watcher never relies on its last look for long)."""


class Limit:
    """One armed limit: the task it guards, when it runs out, and whether the watcher has cancelled the task."""

    __slots__ = ("cancelling", "deadline", "expired", "task", "withdrawn")

    def __init__(self, task: asyncio.Task[object], deadline: float) -> None:
        self.task = task
        self.deadline = deadline
        self.cancelling = task.cancelling()
        """The task's pending cancellations when armed: more than these at expiry means someone else cancelled
        it too (a shutdown), and that cancellation must go on."""
        self.expired = False
        """The watcher has cancelled the task for this limit."""
        self.withdrawn = False
        """That cancellation has been taken back (``uncancel``), as it must be exactly once."""

    def timed_out(self) -> bool:
        """Ask on CancelledError inside the limit: True when it is this limit's doing alone (the cancellation is
        then absorbed, and the caller reports a timeout); False when it must propagate."""
        return self.expired and self._withdraw() <= self.cancelling

    def _withdraw(self) -> int:
        self.withdrawn = True
        return self.task.uncancel()


class Deadlines:
    """The limits of one event loop's actions (create and use it inside that loop)."""

    def __init__(self) -> None:
        self._armed: set[Limit] = set()
        self._watcher: asyncio.Task[None] | None = None
        self._next_look = math.inf
        self._sooner = asyncio.Event()

    @contextmanager
    def limit(self, seconds: float) -> Iterator[Limit]:
        """Cancel the current task once ``seconds`` have passed inside the block (ask :meth:`Limit.timed_out`
        when CancelledError comes out of it)."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a time limit needs a running task")
        loop = asyncio.get_running_loop()
        armed = Limit(task, loop.time() + seconds)
        self._armed.add(armed)
        if self._watcher is None:
            self._watcher = loop.create_task(self._watch(), name="action time limits")
        elif armed.deadline < self._next_look:
            self._sooner.set()
        try:
            yield armed
        finally:
            self._armed.discard(armed)
            if armed.expired and not armed.withdrawn:
                # The action swallowed the cancellation: take it back anyway, as asyncio.timeout does, or the
                # task would count as being cancelled for the rest of its life.
                armed._withdraw()

    def overdue(self, grace: float) -> bool:
        """Whether some action has run on more than ``grace`` seconds past its limit: it ignores its cancellation
        (or the watcher is stuck), so its slot is lost for as long as it runs."""
        now = asyncio.get_running_loop().time()
        return any(armed.deadline + grace < now for armed in self._armed)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._armed:
                now = loop.time()
                earliest = now + MAX_NAP
                for armed in list(self._armed):
                    if armed.expired:
                        continue
                    if armed.deadline <= now:
                        armed.expired = True
                        armed.task.cancel()
                    elif armed.deadline < earliest:
                        earliest = armed.deadline
                self._next_look = earliest
                self._sooner.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(earliest):
                        await self._sooner.wait()
        finally:
            self._watcher = None
            self._next_look = math.inf
