"""The batching options of actions that work on records a batch at a time, over the micro-batcher of
:mod:`dataq.runtime.batching` (re-exported here, where actions have always found it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from dataq.runtime.batching import MicroBatcher

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["BATCHES_IN_FLIGHT", "BatchOptions", "MicroBatcher", "RecordSizes"]

BATCH_PATIENCE = 0.25
"""Seconds at most a batch that is not full waits, while other batches of the action are handled, for them to
end: during a burst the records come a few at a time, and each batch costs its rsync or its sync whatever it
holds (measured: batches of 7 to 48 records out of 100, each taking 0.07-0.15 s). A record that comes alone
goes at once."""
BATCHES_IN_FLIGHT = 2
"""Batches of one action handled at once (unless its options say otherwise: :attr:`BatchOptions.in_flight`): one
is prepared (files read and hashed, copied into the archive) while the other is sent, synced or waits for the
catalog lease."""


UNSIZED_BATCH = 100
"""Records per batch in flight a batching action runs at most before it knows how large its records are: were they
large, a batch would hold a few of them (``batch_bytes``), and the rest would only wait their turn, their time
limits running from their claim."""
SIZES_SEEN = 256
"""Records whose sizes the mean of :class:`RecordSizes` follows (a queue's files change with its nights)."""


class RecordSizes:
    """The mean size of the records an action has been handed lately: how many of them a batch holds is known from
    the first record on, before any batch ends."""

    def __init__(self) -> None:
        self._mean = 0.0
        self._seen = 0

    def saw(self, size: int) -> None:
        self._seen += 1
        self._mean += (size - self._mean) / min(self._seen, SIZES_SEEN)

    @property
    def per_record(self) -> int:
        """Bytes per record (0: no record seen yet)."""
        return max(1, round(self._mean)) if self._seen else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchOptions:
    """The batching options of an action that works on records a batch at a time (``network_move``,
    ``disk_store``). Batches fill only when the pop daemon runs enough records at once: it runs at least
    :attr:`records_to_fill` of them, so that one batch gathers while the others are handled, whatever ``[pop]
    concurrency`` says."""

    in_flight: ClassVar[int] = BATCHES_IN_FLIGHT
    """Batches handled at once (an action's choice, not a setting)."""

    batch_size: int = 100
    """Records in a batch at most."""
    batch_age: float = 0.0
    """Seconds a batch may wait for more records once a slot is free (0: none; a batch gathers anyway while
    the previous ones are handled)."""
    batch_bytes: int = 1 << 30
    """Bytes of files in a batch at most (a batch of one file may hold more): bounds the work a timeout or a
    kill throws away."""

    @property
    def records_to_fill(self) -> int:
        """Records running at once that fill every batch in flight."""
        return self.in_flight * self.batch_size

    def held(self, batch_size: int, bytes_per_record: int) -> int:
        """Records a batch of ``batch_size`` at most holds when its records hold ``bytes_per_record`` each (0: not
        known yet: :data:`UNSIZED_BATCH` at most): as many as ``batch_bytes`` holds, at least one."""
        if bytes_per_record <= 0:
            return min(batch_size, UNSIZED_BATCH)
        return max(1, min(batch_size, self.batch_bytes // bytes_per_record))

    def next_batch(self, batch_size: int, bytes_per_record: int) -> int:
        """Records of a batch of ``batch_size`` at most that may gather while every other is in flight, for an
        action whose records have lately held ``bytes_per_record`` each (0: not known yet, none): as many as
        ``batch_bytes`` holds, at least one. Records of files so large that each is a batch of its own would only
        wait their turn, their time limits running from their claim."""
        return self.held(batch_size, bytes_per_record) if bytes_per_record > 0 else 0

    def at_once(self, max_connections: int | None) -> int:
        """Batches handled at once at most under an option ``max_connections`` (None: one per batch in flight)."""
        if max_connections is not None and max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        return min(self.in_flight, max_connections or self.in_flight)

    def check_batching(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.batch_bytes < 1:
            raise ValueError(f"batch_bytes must be at least 1, got {self.batch_bytes}")
        if not 0 <= self.batch_age < float("inf"):
            raise ValueError(f"batch_age must be a number of seconds, 0 or more, got {self.batch_age}")

    def batcher(self, handle: Callable[[list[T]], Awaitable[Sequence[R]]],
                size_of: Callable[[T], int]) -> MicroBatcher[T, R]:
        return MicroBatcher(handle, size=self.batch_size, age=self.batch_age, in_flight=self.in_flight,
                            weight=size_of, max_weight=self.batch_bytes, patience=BATCH_PATIENCE)
