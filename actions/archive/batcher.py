"""Micro-batching: concurrent calls, one item each, gathered into batches for one handler call per batch.

The pop daemon runs an action once per record, many at once; an action whose real work is per batch (a Spark job,
say) submits each record here and awaits its own result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Gathers concurrent :meth:`submit` calls into batches for ``handle``, each caller awaiting its own result.

    A batch is cut when it holds ``size`` items or ``age`` seconds after its first item, whichever comes first;
    at most ``in_flight`` batches are handled at once. ``handle`` returns one result per item, in order; if it
    raises, every caller of that batch gets the exception. A caller cancelled before its batch is handled
    leaves the batch.
    """

    def __init__(self, handle: Callable[[list[T]], Awaitable[Sequence[R]]], *, size: int, age: float,
                 in_flight: int = 2) -> None:
        self._handle, self.size, self.age = handle, size, age
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._slots = asyncio.Semaphore(in_flight)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def cut_at(self) -> float | None:
        """When (event-loop time) the pending batch is cut by age; None when nothing is pending."""
        return self._timer.when() if self._timer is not None else None

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.size:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.age, self.flush)
        return await future  # cancelling the caller cancels the future: its batch skips it

    def flush(self) -> None:
        """Cut the pending batch now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.create_task(self._run(batch), name="micro-batch")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Cut the pending batch and wait until every batch is handled."""
        self.flush()
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        async with self._slots:
            live = [(item, future) for item, future in batch if not future.done()]
            if not live:
                return
            try:
                results = await self._handle([item for item, _ in live])
                if len(results) != len(live):
                    raise RuntimeError(f"batch handler returned {len(results)} results for {len(live)} items")
            except Exception as exc:
                for _, future in live:
                    if not future.done():
                        future.set_exception(exc)
                return
            for (_, future), result in zip(live, results, strict=True):
                if not future.done():
                    future.set_result(result)
