"""Micro-batching: concurrent calls, one item each, gathered into batches for one handler call per batch.

The pop daemon runs an action once per record, many at once; an action whose real work is per batch (a Spark job,
one rsync for many files, one sync of the disk for many copies) submits each record here and awaits its own
result. A feeder gathers the files it looks at the same way, so that one trip to a thread serves many. Hand-written:
asyncio has no batching primitive, and the libraries that offer one (aiobatcher and the like) neither leave out a
caller that gave up nor stop a batch whose callers all did.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False)
class _Batch(Generic[T, R]):
    entries: list[tuple[T, asyncio.Future[R]]]
    task: asyncio.Task[None] | None = None
    weight: int = field(default=0)


class MicroBatcher(Generic[T, R]):
    """Gathers concurrent :meth:`submit` calls into batches for ``handle``, each caller awaiting its own result.

    A batch is cut when it holds ``size`` items (or ``max_weight`` of ``weight``), or ``age`` seconds after its
    first item, whichever comes first; at most ``in_flight`` batches are handled at once. A batch due by age
    while every slot is busy keeps gathering until a slot frees (so a busy handler gets fuller batches, the
    way a group commit works); ``age=0`` thus means "as soon as a slot is free". With ``patience``, a batch due
    while other batches are being handled gathers until every one of them has ended, ``patience`` seconds at
    most, even if a slot is free: items come in a stream then (a burst), and a batch of a few costs a handler's
    call as a full one does. Cut as soon as one of two running batches ended, batches of a stream settle into
    lanes of fixed, uneven sizes (measured: 16, 38, 80 of 100, cycling). With nothing being handled a due batch
    is cut at once, so a lone item waits for nothing.

    With ``stream_gap``, items that come less than ``stream_gap`` seconds after the item before them stream (a
    burst): a batch whose first item streams gathers for as long as they go on coming so, ``stream_age`` seconds
    at most, instead of ``age``, and is cut once ``stream_gap`` passes without an item. A batch of many then
    costs the handler's call once where batches of one or two each cost it; an item that comes alone, or in a
    trickle slower than one per ``stream_gap``, waits only ``age``.

    ``handle`` returns one result per item, in order; if it raises, every caller of that batch gets the exception.
    A caller cancelled before its batch is handled leaves the batch; once every caller of a running batch has
    left (their timeouts, a shutdown), the handler is cancelled too.
    """

    def __init__(self, handle: Callable[[list[T]], Awaitable[Sequence[R]]], *, size: int, age: float,
                 in_flight: int = 2, weight: Callable[[T], int] | None = None, max_weight: int | None = None,
                 patience: float = 0.0, stream_gap: float = 0.0, stream_age: float = 0.0) -> None:
        self._handle, self.size, self.age, self.patience = handle, size, age, patience
        self.stream_gap, self.stream_age = stream_gap, max(age, stream_age)
        self._last_item = -math.inf
        """When (event-loop time) the last item came."""
        self._stream_end: float | None = None
        """When (event-loop time) the pending batch, gathering a stream, is cut at the latest; None: it is not."""
        self._weight, self._max_weight = weight, max_weight
        self._pending: _Batch[T, R] = _Batch([])
        self._timer: asyncio.TimerHandle | None = None
        """Before the pending batch is due: its age; once due, its patience (None: patience over, or none)."""
        self._due = False
        """The pending batch is past its age and waits: for a free slot, and while its patience lasts, for the
        running batches to end."""
        self._slots = asyncio.Semaphore(in_flight)
        self._closed = False
        """close() gave up waiting: no batch starts any more."""
        self._running: set[_Batch[T, R]] = set()

    @property
    def cut_at(self) -> float | None:
        """When (event-loop time) the pending batch falls due by age, or its patience runs out (it is then cut as
        soon as a slot is free); None when nothing is pending or it waits for a free slot alone."""
        return self._timer.when() if self._timer is not None else None

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        streaming = False
        if self.stream_gap:  # the clock is read only by a batcher that looks for streams
            now = future.get_loop().time()
            streaming, self._last_item = now - self._last_item < self.stream_gap, now
        pending = self._pending
        pending.entries.append((item, future))
        if self._weight is not None:
            pending.weight += self._weight(item)
        full = self._max_weight is not None and pending.weight >= self._max_weight
        if len(pending.entries) >= self.size or full:
            self.flush()
        elif self._timer is None and not self._due:
            loop = asyncio.get_running_loop()
            if streaming:
                self._stream_end = now + self.stream_age
                self._timer = loop.call_at(min(now + self.stream_gap, self._stream_end), self._aged)
            else:
                self._timer = loop.call_later(self.age, self._aged)
        try:
            return await future  # cancelling the caller cancels the future: its batch skips it
        finally:
            if future.cancelled():
                self._left(future)

    def _aged(self) -> None:
        if self._stream_end is not None:
            # The stream went on: gather until it pauses (an item's gap comes later than the timer knew).
            loop = asyncio.get_running_loop()
            cut = min(self._last_item + self.stream_gap, self._stream_end)
            if cut > loop.time():
                self._timer = loop.call_at(cut, self._aged)
                return
            self._stream_end = None
        self._due = True
        self._timer = None
        if self._running and self.patience > 0:
            self._timer = asyncio.get_running_loop().call_later(self.patience, self._impatient)
        self._cut_if_ready()

    def _impatient(self) -> None:
        self._timer = None
        self._cut_if_ready()

    def _cut_if_ready(self) -> None:
        """Cut the due batch unless it must wait: for a free slot (the items that come meanwhile join it), or,
        while its patience lasts, for every batch being handled to end."""
        if not self._due or self._slots.locked():
            return
        if self._running and self._timer is not None:
            return
        self.flush()

    def flush(self) -> None:
        """Cut the pending batch now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due = False
        self._stream_end = None
        batch, self._pending = self._pending, _Batch([])
        if self._closed:
            for _, future in batch.entries:
                future.cancel()  # as a caller of a running batch is when close() gives up
            return
        if batch.entries:
            batch.task = asyncio.create_task(self._run(batch), name="micro-batch")
            self._running.add(batch)
            batch.task.add_done_callback(lambda _: self._ended(batch))

    def _ended(self, batch: _Batch[T, R]) -> None:
        self._running.discard(batch)
        self._cut_if_ready()

    def _left(self, future: asyncio.Future[R]) -> None:
        """A caller gave up: if it was the last of its running batch, stop that batch's work."""
        for batch in self._running:
            if any(entry is future for _, entry in batch.entries):
                if batch.task is not None and all(entry.done() for _, entry in batch.entries):
                    batch.task.cancel()
                return

    async def drain(self) -> None:
        """Cut the pending batch and wait until every batch is handled."""
        self.flush()
        while self._running:
            await asyncio.wait({batch.task for batch in self._running if batch.task is not None})

    async def close(self, grace: float) -> bool:
        """Drain for up to ``grace`` seconds, then cancel the batches still running; True if all were drained."""
        try:
            async with asyncio.timeout(grace):
                await self.drain()
            return True
        except TimeoutError:
            # Nothing starts after this: the batch still gathering is given up as the running ones are.
            self._closed = True
            self.flush()
            tasks = {batch.task for batch in self._running if batch.task is not None}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return False

    async def _run(self, batch: _Batch[T, R]) -> None:
        async with self._slots:
            live = [(item, future) for item, future in batch.entries if not future.done()]
            if not live:
                return
            try:
                results = await self._handle([item for item, _ in live])
                if len(results) != len(live):
                    raise RuntimeError(f"batch handler returned {len(results)} results for {len(live)} items")
            except asyncio.CancelledError:
                for _, future in live:  # stopped by close(): its callers stop waiting, as if cancelled
                    future.cancel()
                raise
            except Exception as exc:
                for _, future in live:
                    if not future.done():
                        future.set_exception(exc)
                return
            for (_, future), result in zip(live, results, strict=True):
                if not future.done():
                    future.set_result(result)
