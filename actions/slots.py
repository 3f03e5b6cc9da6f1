"""Room for a bounded number of calls to one destination at once (``max_connections``), knowing which records wait
for it: the pop daemon's heartbeat names them, so ``dataq-cli --why`` can say that a record in flight is held by
the limit rather than running."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence

from dataq.ops.documents import WAITING_KEY

MOST_NAMED = 1_000
"""Ids of waiting records a heartbeat names at most (a queue's records in flight are bounded by its concurrency)."""


class Slots:
    """At most :attr:`room` calls at once; the others wait their turn, first come first served."""

    def __init__(self, destination: str, room: int) -> None:
        self.destination = destination
        self._room = room
        self.open = 0
        """Calls inside now."""
        self._waiting: deque[tuple[asyncio.Future[None], Sequence[str]]] = deque()

    @property
    def room(self) -> int:
        return self._room

    @room.setter
    def room(self, room: int) -> None:
        """A new room (a reload, or the far side taking fewer): calls inside go on; waiting ones enter if it grew."""
        self._room = room
        self.wake()

    async def enter(self, ids: Sequence[str] = ()) -> None:
        """Wait for room, then take it (give it back with :meth:`leave`); ``ids``: the records the call is for."""
        while self.open >= self._room:
            waiter = asyncio.get_running_loop().create_future()
            entry = (waiter, ids)
            self._waiting.append(entry)
            try:
                await waiter
            except asyncio.CancelledError:
                self._drop(entry)
                if waiter.done() and not waiter.cancelled():
                    self.wake()  # woken, yet leaving: the room goes to the next one
                raise
            self._drop(entry)
        self.open += 1

    def _drop(self, entry: tuple[asyncio.Future[None], Sequence[str]]) -> None:
        with contextlib.suppress(ValueError):
            self._waiting.remove(entry)

    def leave(self) -> None:
        self.open -= 1
        self.wake()

    def wake(self) -> None:
        room = self._room - self.open
        for waiter, _ in list(self._waiting):
            if room <= 0:
                break
            if waiter.cancelled():
                continue  # leaving: it takes no room
            # A waiter woken before and not yet in holds its room still: counting it keeps the order first come.
            if not waiter.done():
                waiter.set_result(None)
            room -= 1

    def status(self, limit: int) -> dict[str, object]:
        """For the heartbeat, while records wait: the destination's limit, the calls open and the waiting ids."""
        ids = [record_id for _, waiting in self._waiting for record_id in waiting][:MOST_NAMED]
        if not ids:
            return {}
        return {WAITING_KEY: {self.destination: {"max_connections": limit, "open": self.open, "ids": ids}}}
