"""The active lists of a queue's activities (:mod:`dataq.activities`) as the operator's views read them: each
activity's backlog, the records of all lists in the order they are served, and the adoption of lists no
activity of these settings serves."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dataq.record import Record
from dataq.store.base import StoreBase
from dataq.store.connection import translated
from dataq.stored_value import decode_stored

ADOPT_CHUNK = 10_000
"""Records one call of ``adopt.lua`` moves, so Redis is never held long."""


@dataclass(frozen=True, slots=True)
class ActiveList:
    """One activity's active list."""

    activity: str
    key: str
    served: bool = True
    """Whether these settings serve it (False: its activity was removed; the pop daemon adopts its records)."""


@dataclass(frozen=True, slots=True)
class Queued:
    """Where a record waits: its activity's list, its place there (1: next to run) and the list's length."""

    list: ActiveList
    place: int
    length: int
    before: int
    """Records queued in the activities served before this one (strict ones, and shares earlier in the order):
    a hint of what else claims may take first, not a promise (shares interleave)."""


class ActivityOps(StoreBase):
    @translated
    async def active_lists(self) -> list[ActiveList]:
        """Every active list in the order claims look at them (strict activities first, then the shares), then
        the lists of activities these settings do not define that hold records (until the sweeper adopts them)."""
        lists = [ActiveList(a.name, self.keys.active_of(a.name)) for a in self.plan.served]
        known: set[str] = await self.r.smembers(self.keys.activities)
        unserved = [ActiveList(name, self.keys.active_of(name), served=False)
                    for name in sorted(known) if name not in self.plan]
        if unserved:
            # Names stay in the set for good (see adopt.lua): only those whose lists hold records count.
            pipe = self.r.pipeline(transaction=False)
            for entry in unserved:
                pipe.llen(entry.key)
            lengths = await pipe.execute()
            lists += [entry for entry, length in zip(unserved, lengths, strict=True) if int(length)]
        return lists

    @translated
    async def queued_at(self, record_id: str) -> Queued | None:
        """Where a record waits among the active lists (None: in none of them)."""
        lists = await self.active_lists()
        pipe = self.r.pipeline(transaction=True)
        for entry in lists:
            pipe.lpos(entry.key, record_id)
            pipe.llen(entry.key)
        found = await pipe.execute()
        for number, entry in enumerate(lists):
            index, length = found[2 * number], found[2 * number + 1]
            if index is not None:
                ahead = sum(int(found[2 * other + 1]) for other in range(number) if lists[other].served)
                # LPOS counts from the newest end; the run order counts from the other.
                return Queued(entry, int(length) - int(index), int(length), ahead)
        return None

    @translated
    async def adopt_unserved(self) -> int:
        """Move the records of activities these settings do not serve to default's list (the sweeper's round)."""
        moved = 0
        for entry in await self.active_lists():
            if entry.served:
                continue
            while True:
                count = int(await self._script(
                    "adopt", [entry.key, self.keys.active, self.keys.events],
                    [entry.activity, ADOPT_CHUNK, self.events_max_len], replicated=True))
                moved += count
                if count < ADOPT_CHUNK:
                    break
        if moved:
            await self._announce_work()
        return moved

    async def _active_slice(self, offset: int, limit: int | None) -> tuple[bool, list[tuple[str, list[str]]]]:
        """The ids from ``offset`` on (at most ``limit``) of all active lists one after the other, each list in its
        order (newest first), as (activity, ids) per list touched; and whether there is more than one list."""
        lists = await self.active_lists()
        pipe = self.r.pipeline(transaction=True)
        for entry in lists:
            pipe.llen(entry.key)
        lengths = await pipe.execute()
        found: list[tuple[str, list[str]]] = []
        start, wanted = offset, limit
        for entry, length in zip(lists, lengths, strict=True):
            if wanted is not None and wanted <= 0:
                break
            if start >= length:
                start -= length
                continue
            end = -1 if wanted is None else start + wanted - 1
            ids: list[str] = await self.r.lrange(entry.key, start, end)
            found.append((entry.activity, ids))
            if wanted is not None:
                wanted -= len(ids)
            start = 0
        return len(lists) > 1, found

    async def _active_records(self, offset: int, limit: int | None) -> list[Record]:
        """Records of :meth:`_active_slice`, each with the activity whose list it waits in (a queue without
        activities leaves them as stored: its listing stays as it always was)."""
        records: list[Record] = []
        many, parts = await self._active_slice(offset, limit)
        for activity, ids in parts:
            if not ids:
                continue
            values = await self.r.hmget(self.keys.records, ids)
            records += [replace(decode_stored(record_id, value), activity=activity) if many
                        else decode_stored(record_id, value)
                        for record_id, value in zip(ids, values, strict=True) if value is not None]
        return records
