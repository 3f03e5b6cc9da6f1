"""Writes answered "not replicated": remembered so that the feeder's resend repeats the very same write.

A push batch that the master took but too few replicas confirmed (``min_replicas``) is answered ``Error: not
replicated ...``, and the feeder sends its records again. The first write may well have landed; as a new write
(new push time) a resent record would then come back ``Ignored``, and the feeder would think someone else had
queued it. So the committer keeps each unconfirmed record with its push time and source, and sends a matching
resend as a retry of that write (``push_batch.lua`` recognises its own earlier value): ``Pushed`` either way,
and nothing is queued twice.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from dataq.record import Record

UNCONFIRMED_LIMIT = 100_000
"""Unconfirmed writes remembered at most (the oldest are forgotten first: their resends become new writes)."""

Item = tuple[Record, str]
"""A record and its source, as the store takes them."""


@dataclass(frozen=True, slots=True)
class Replay:
    """A group of a batch's records that repeat one earlier unconfirmed write."""

    pushed_at: float
    positions: list[int]
    """Where each record is in the batch."""
    items: list[Item]
    """Each record with the source of the earlier write."""


class Unconfirmed:
    """What was answered "not replicated", by record id: the record, its source and its push time."""

    def __init__(self, limit: int = UNCONFIRMED_LIMIT) -> None:
        self._writes: OrderedDict[str, tuple[Record, str, float]] = OrderedDict()
        self._limit = limit

    def __len__(self) -> int:
        return len(self._writes)

    def remember(self, items: Sequence[Item], pushed_at: float, replays: Sequence[Replay]) -> None:
        """The batch ``items`` written at ``pushed_at`` (except the ``replays``, which keep their own write)
        was not confirmed."""
        earlier = {position: (item[1], replay.pushed_at) for replay in replays
                   for position, item in zip(replay.positions, replay.items, strict=True)}
        for position, (record, source) in enumerate(items):
            write_source, write_time = earlier.get(position, (source, pushed_at))
            self._writes[record.checksum] = (record, write_source, write_time)
            self._writes.move_to_end(record.checksum)
        while len(self._writes) > self._limit:
            self._writes.popitem(last=False)

    def replays(self, items: Sequence[Item]) -> list[Replay]:
        """The records of ``items`` that resend an unconfirmed write unchanged, grouped by that write."""
        groups: dict[float, Replay] = {}
        for position, (record, _) in enumerate(items):
            earlier = self._writes.get(record.checksum)
            if earlier is None or earlier[0] != record:
                continue
            group = groups.setdefault(earlier[2], Replay(earlier[2], [], []))
            group.positions.append(position)
            group.items.append((record, earlier[1]))
        return list(groups.values())

    def confirmed(self, items: Sequence[Item]) -> None:
        """These records' writes are confirmed now (or were refused): nothing to repeat any more."""
        if self._writes:
            for record, _ in items:
                self._writes.pop(record.checksum, None)
