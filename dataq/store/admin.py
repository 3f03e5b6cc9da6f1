"""The operator's view and levers: range moves, clear, summary, listing, dump and the event stream."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import redis.exceptions as rexc

from dataq.errors import StoreError
from dataq.record import Record
from dataq.store import remembered
from dataq.store.activities import ActivityOps
from dataq.store.connection import translate, translated
from dataq.store.types import Event, Flag, QueueList, RecordState, Summary
from dataq.stored_value import decode_stored, stored_pushed_at

ACTIVATE_ALL_CHUNK = 10_000
"""Records moved per script call by activate-all, so Redis is never blocked for long."""

LIST_CHUNK = 1_000
"""Records read per round trip when streaming a list."""
FORGET_DONE_CHUNK = 4_096
"""Shards of the remembered done records forgotten per script call (of 65,536 per generation): each call is
short, so Redis keeps serving the pushes meanwhile."""


class AdminOps(ActivityOps):
    async def _move_range(self, mode: str, source: QueueList, first: str, last: str) -> int:
        k = self.keys
        other = QueueList.INACTIVE if source is QueueList.ACTIVE else QueueList.ACTIVE
        moved = await self._script(
            "move_range",
            [k.inactive, k.records, k.errors, k.lasterror, k.crashes, k.events, k.counters, *self._active_lists],
            [mode, first, last, self.events_max_len, source.value, other.value, self._named],
            replicated=True,
        )
        return int(moved)

    @translated
    async def advance(self, first: str, last: str) -> int:
        """Move active records first..last to the next-to-run end, keeping their order."""
        return await self._move_range("advance", QueueList.ACTIVE, first, last)

    @translated
    async def deactivate(self, first: str, last: str) -> int:
        """Move active records first..last to the inactive list."""
        return await self._move_range("deactivate", QueueList.ACTIVE, first, last)

    @translated
    async def activate(self, first: str, last: str) -> int:
        """Move inactive records first..last back to the active list with fresh error counts."""
        moved = await self._move_range("activate", QueueList.INACTIVE, first, last)
        await self._announce_work()
        return moved

    @translated
    async def delete(self, which: QueueList, first: str, last: str) -> int:
        """Forget records first..last of the given list."""
        return await self._move_range("delete", which, first, last)

    @translated
    async def activate_all(self) -> int:
        """Move every inactive record back to the active list (the CLI's ``--redo``)."""
        k = self.keys
        total = 0
        while True:
            moved = int(
                await self._script(
                    "activate_all",
                    [
                        k.inactive,
                        k.records,
                        k.errors,
                        k.lasterror,
                        k.crashes,
                        k.events,
                        k.counters,
                        *self._active_lists,
                    ],
                    [ACTIVATE_ALL_CHUNK, self.events_max_len, self._named],
                    replicated=True,
                )
            )
            total += moved
            if moved < ACTIVATE_ALL_CHUNK:
                if total:
                    await self._announce_work()
                return total

    @translated
    async def clear(self) -> int:
        """Forget every record of the queue without running any action; returns how many."""
        k = self.keys
        workers: list[str] = await self.r.hkeys(k.workers)
        data = [key for key in k.data_keys() if key != k.records]
        keys = [
            k.records,
            k.events,
            k.counters,
            *data,
            *(entry.key for entry in await self.active_lists() if entry.key != k.active),
            *(k.processing(w) for w in workers),
        ]
        return int(await self._script("clear", keys, [self.events_max_len], replicated=True))

    @translated
    async def forget_done(self) -> int:
        """Forget every remembered done record (the generations a push reads now), so that records pushed again
        are stored and run again; returns how many ids were remembered."""
        generations = sorted(set(remembered.generations(time.time(), self.remember_done)))
        shards = [shard for generation in generations for shard in self.keys.done_shards(generation)]
        forgotten = 0
        for start in range(0, len(shards), FORGET_DONE_CHUNK):
            chunk = shards[start:start + FORGET_DONE_CHUNK]
            forgotten += int(await self._script("forget_done", chunk, [], replicated=True))
        return forgotten

    @translated
    async def summary(self) -> Summary:
        k = self.keys
        lists = await self.active_lists()
        pipe = self.r.pipeline(transaction=True)
        for entry in lists:
            pipe.llen(entry.key)
        pipe.llen(k.inactive)
        pipe.zcard(k.delayed)
        pipe.hlen(k.records)
        pipe.hgetall(k.flags)
        pipe.hlen(k.workers)
        pipe.hgetall(k.counters)
        pipe.hlen(k.custody)
        pipe.zrange(k.custody_since, 0, 0, withscores=True)
        pipe.hgetall(k.custody_sites)
        *lengths, inactive, delayed, tracked, flags, workers, counters, custody, oldest, sites = await pipe.execute()
        backlogs = {entry.activity: int(length) for entry, length in zip(lists, lengths, strict=True)}
        active = sum(backlogs.values())
        return Summary(
            queue=self.queue,
            active=active,
            inactive=inactive,
            delayed=delayed,
            in_flight=tracked - active - inactive - delayed,
            tracked=tracked,
            action=flags.get(Flag.ACTION.value, "on") != "off",
            read=flags.get(Flag.READ.value, "on") != "off",
            workers=workers,
            counters={name: int(value) for name, value in counters.items()},
            custody=custody,
            custody_since=oldest[0][1] / 1000 if oldest else None,
            custody_sites={site: int(count) for site, count in sites.items()},
            activities=backlogs if len(backlogs) > 1 else {},
        )

    @translated
    async def oldest_pushed(self) -> dict[str, float]:
        """When the next record to run (active) and the next one due (delayed) were pushed (unix time); an empty
        list is left out. Keyed ``active`` and ``delayed``, as the lists are named in the metrics.

        Only the end records leave from is read, so the read is O(1) however long the backlog. Records join the
        active list at the other end, so the one next to run has waited longest in line, unless it was put back
        (retried, or redone by an operator): it counts from its first push, as a message's age does in SQS. Of the
        activities' lists, the next to run that waited longest counts."""
        queued = await self.oldest_queued()
        next_due = await self.r.zrange(self.keys.delayed, 0, 0)
        due = await self._pushed_at(next_due)
        oldest: dict[str, float] = {}
        if queued:
            oldest["active"] = min(queued.values())
        if due:
            oldest["delayed"] = min(due.values())
        return oldest

    @translated
    async def oldest_queued(self) -> dict[str, float]:
        """Per activity with records queued, when its next record to run was pushed (unix time): two round trips,
        the lists' ends, then their stored values (a record claimed in between is left out)."""
        lists = await self.active_lists()
        pipe = self.r.pipeline(transaction=True)
        for entry in lists:
            pipe.lrange(entry.key, -1, -1)
        ends = await pipe.execute()
        pushed = await self._pushed_at([record_id for found in ends for record_id in found])
        return {entry.activity: pushed[found[0]] for entry, found in zip(lists, ends, strict=True)
                if found and found[0] in pushed}

    async def _pushed_at(self, ids: list[str]) -> dict[str, float]:
        """When each record was pushed, from its stored value (one not tracked any more is left out)."""
        if not ids:
            return {}
        values = dict(zip(ids, await self.r.hmget(self.keys.records, ids), strict=True))
        found = {}
        for record_id, value in values.items():
            pushed = stored_pushed_at(value) if value is not None else None
            if pushed is not None:
                found[record_id] = pushed
        return found

    @translated
    async def records(self, ids: list[str]) -> list[Record]:
        """The records of ``ids`` this queue tracks, as stored (one round trip; an id not tracked is left out)."""
        return await self._records_for(ids)

    async def _records_for(self, ids: list[str]) -> list[Record]:
        if not ids:
            return []
        values = await self.r.hmget(self.keys.records, ids)
        return [decode_stored(i, v) for i, v in zip(ids, values, strict=True) if v is not None]

    @translated
    async def list_records(self, which: QueueList, offset: int = 0, limit: int | None = None) -> list[Record]:
        """Records of a list in list order (active: newest first, next to run last)."""
        if offset < 0 or (limit is not None and limit < 0):
            raise StoreError("offset and limit must not be negative")
        if limit == 0:
            return []
        if which is QueueList.ACTIVE:
            return await self._active_records(offset, limit)
        end = -1 if limit is None else offset + limit - 1
        ids: list[str] = await self.r.lrange(self.keys.inactive, offset, end)
        return await self._records_for(ids)

    async def iter_records(
        self, which: QueueList | None, chunk: int = LIST_CHUNK, *, oldest_first: bool = False
    ) -> AsyncIterator[Record]:
        """Stream a list in order, left (newest) to right, or right to left with ``oldest_first`` (the active
        list's run order); with ``which`` None, every tracked record in hash order.

        Reads ``chunk`` records per round trip, so memory stays bounded whatever the queue's length. A list
        that changes while it is streamed may yield a record twice or skip one that moved.
        """
        try:
            if which is None:
                cursor = 0
                while True:
                    cursor, batch = await self.r.hscan(self.keys.records, cursor, count=chunk)
                    for record_id, value in batch.items():
                        yield decode_stored(record_id, value)
                    if cursor == 0:
                        return
            lists = [(None, self.keys.inactive)] if which is QueueList.INACTIVE \
                else [(entry.activity, entry.key) for entry in await self.active_lists()]
            for activity, key in lists:
                offset = 0
                while True:
                    if oldest_first:
                        ids: list[str] = await self.r.lrange(key, -offset - chunk, -offset - 1)
                        ids.reverse()
                    else:
                        ids = await self.r.lrange(key, offset, offset + chunk - 1)
                    for record in await self._records_for(ids):
                        # With activities, each record as the list it waits in has it (--dump keeps it so).
                        yield replace(record, activity=activity) if len(lists) > 1 else record
                    if len(ids) < chunk:
                        break
                    offset += chunk
        except (rexc.RedisError, OSError) as exc:
            raise translate(exc) from exc

    @translated
    async def record_state(self, record_id: str) -> RecordState | None:
        """Where a tracked record stands and its failure history; None if not tracked."""
        k = self.keys
        queued = await self.queued_at(record_id)
        pipe = self.r.pipeline(transaction=True)
        pipe.hget(k.records, record_id)
        pipe.lpos(k.inactive, record_id)
        pipe.zscore(k.delayed, record_id)
        pipe.hget(k.errors, record_id)
        pipe.hget(k.crashes, record_id)
        pipe.hget(k.lasterror, record_id)
        (
            value,
            in_inactive,
            delay,
            errors,
            crashes,
            last_error,
        ) = await pipe.execute()
        if value is None:
            return None
        where = (
            "active"
            if queued is not None
            else "inactive"
            if in_inactive is not None
            else "delayed"
            if delay is not None
            else "in-flight"
        )
        return RecordState(
            decode_stored(record_id, value),
            where,
            int(errors or 0),
            int(crashes or 0),
            last_error,
        )

    @staticmethod
    def _events(entry_id: str, fields: dict[str, str]) -> list[Event]:
        """The events of one stream entry: one per id (a push writes one entry for its whole batch, ids joined by
        newlines), all with the entry's id and time."""
        when = int(entry_id.split("-", 1)[0]) / 1000
        kind, detail = fields.get("k", ""), fields.get("d", "")
        return [Event(event_id=entry_id, time=when, kind=kind, record_id=record_id, detail=detail)
                for record_id in fields.get("id", "").split("\n")]

    @translated
    async def events(self, count: int = 20) -> list[Event]:
        """The last ``count`` events, oldest first."""
        if count <= 0:
            return []
        entries = await self.r.xrevrange(self.keys.events, count=count)
        found = [event for entry_id, fields in reversed(entries) for event in self._events(entry_id, fields)]
        return found[-count:]

    @translated
    async def events_after(self, last_id: str, block: float | None = None, count: int = 1000) -> list[Event]:
        """Events after the stream id ``last_id`` (``$`` for only new ones), waiting up to ``block`` seconds.

        Reads up to ``count`` stream entries; one entry may hold many events (a push's whole batch), all with the
        entry's id, so the last event's id is the place to go on from."""
        reply = await self.r.xread(
            {self.keys.events: last_id},
            count=count,
            block=None if block is None else int(block * 1000),
        )
        return [event for _, entries in reply for entry_id, fields in entries
                for event in self._events(entry_id, fields)]

    @translated
    async def trim_events(self, max_age: float, now: float | None = None) -> int:
        """Drop events older than ``max_age`` seconds."""
        cutoff = int(((time.time() if now is None else now) - max_age) * 1000)
        return int(await self.r.xtrim(self.keys.events, minid=f"{cutoff}-0", approximate=True))

    @translated
    async def counters(self) -> dict[str, int]:
        values: dict[str, str] = await self.r.hgetall(self.keys.counters)
        return {name: int(value) for name, value in values.items()}

    @translated
    async def server_info(self) -> dict[str, Any]:
        """What the operator wants to know about the Redis server (``dataq-cli --info``)."""
        info: dict[str, Any] = await self.r.info()
        wanted = (
            "redis_version",
            "redis_mode",
            "role",
            "uptime_in_seconds",
            "connected_clients",
            "used_memory",
            "used_memory_human",
            "maxmemory",
            "aof_enabled",
            "aof_last_write_status",
            "rdb_last_bgsave_status",
            "loading",
        )
        result = {key: info[key] for key in wanted if key in info}
        try:
            config = await self.r.config_get("appendfsync")
            result["appendfsync"] = config.get("appendfsync")
        except rexc.ResponseError:
            # Managed servers often rename or forbid CONFIG; the rest of the report still stands.
            result["appendfsync"] = None
        return result
