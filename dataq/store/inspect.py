"""Why a record failed and where it stands: the failure history of listed records, and everything about one.

Read-only, for ``dataq-cli --list inactive`` and ``--show``; the daemons never call it. The history of one record
comes from the event stream, read newest first in pages and bounded by the stream's own length, so it costs a
few round trips, once, when an operator asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dataq.keys import DEFAULT_ACTIVITY
from dataq.store.admin import AdminOps
from dataq.store.connection import translated
from dataq.store.types import Event, Failures, RecordView
from dataq.stored_value import decode_stored

HISTORY_PAGE = 250
"""Stream entries read per round trip at most when looking for one record's events (1,000 of one record each took
Redis 1.7 ms)."""
HISTORY_PAGE_BYTES = 128 * 1024
"""About the ids one read of the stream should return: a push's event names every id of its batch (32 KB for 1,000
records), so a page of 1,000 of those took Redis 20 ms, and of 16 1.4 ms. Pages start small and each is sized from
the bytes of the one before (growing at most fourfold), so that no read holds Redis for a millisecond
(``bench/console.py``)."""
HISTORY_PAGE_FIRST = 4
HISTORY_PAGE_GROWTH = 4
CLOCK_SKEW = 60.0
"""Seconds a record's history is read from before its push time: the stream is stamped by Redis's clock, the push
time by the push daemon's, and hosts' clocks differ."""
HISTORY_EVENTS_MAX = 200
"""Most events of one record shown (the newest)."""


class InspectOps(AdminOps):
    @translated
    async def failures(self, ids: Sequence[str]) -> dict[str, Failures]:
        """Failure count, crash count and last error of each id (zeros and None for a record that never failed),
        in one round trip."""
        if not ids:
            return {}
        k = self.keys
        pipe = self.r.pipeline(transaction=False)
        pipe.hmget(k.errors, list(ids))
        pipe.hmget(k.crashes, list(ids))
        pipe.hmget(k.lasterror, list(ids))
        errors, crashes, last = await pipe.execute()
        return {record_id: Failures(int(e or 0), int(c or 0), m)
                for record_id, e, c, m in zip(ids, errors, crashes, last, strict=True)}

    @translated
    async def show(self, record_id: str) -> RecordView:
        """Everything about one record: its fields, where it is, its failures and its events."""
        k = self.keys
        queued = await self.queued_at(record_id)
        pipe = self.r.pipeline(transaction=True)
        pipe.hget(k.records, record_id)
        pipe.llen(k.active)
        pipe.lpos(k.inactive, record_id)
        pipe.zscore(k.delayed, record_id)
        pipe.hkeys(k.workers)
        value, length, in_inactive, due_ms, workers = await pipe.execute()
        failures = (await self.failures([record_id]))[record_id]
        record = None if value is None else decode_stored(record_id, value)
        # A record still tracked has no event before its push: the stream before that is not read.
        pushed = record.pushed_at if record is not None else None
        events = await self._history(record_id, None if pushed is None else pushed - CLOCK_SKEW)
        place, worker, due, before = None, None, None, 0
        if record is None:
            where = "done" if any(event.kind == "done" for event in events) else "unknown"
        elif queued is not None:
            where, place, length, before = "active", queued.place, queued.length, queued.before
            if queued.list.activity != DEFAULT_ACTIVITY or record.activity is not None:
                record = replace(record, activity=queued.list.activity)
        elif in_inactive is not None:
            where = "inactive"
        elif due_ms is not None:
            where, due = "delayed", float(due_ms) / 1000
        else:
            where, worker = "in-flight", await self._holder(record_id, workers)
        return RecordView(record_id, record, where, place, int(length), worker, due, failures, events, before)

    async def _holder(self, record_id: str, workers: list[str]) -> str | None:
        """The worker whose processing list holds the record (None: between two lists, or a worker unknown)."""
        if not workers:
            return None
        pipe = self.r.pipeline(transaction=False)
        for worker in workers:
            pipe.lpos(self.keys.processing(worker), record_id)
        found = await pipe.execute()
        return next((worker for worker, index in zip(workers, found, strict=True) if index is not None), None)

    async def _history(self, record_id: str, since: float | None = None) -> list[Event]:
        """The record's events, oldest first (the newest :data:`HISTORY_EVENTS_MAX`), none before ``since`` (unix
        time; None: back to the stream's start)."""
        found: list[Event] = []
        upper, lower = "+", "-" if since is None else str(max(0, int(since * 1000)))
        count = HISTORY_PAGE_FIRST
        while len(found) < HISTORY_EVENTS_MAX:
            entries = await self.r.xrevrange(self.keys.events, max=upper, min=lower, count=count)
            size = 0
            for entry_id, fields in entries:
                ids = fields.get("id", "")
                size += len(ids)
                if record_id in ids:  # cheap test first: most entries are other records'
                    found += [event for event in self._events(entry_id, fields) if event.record_id == record_id]
            if len(entries) < count:
                break
            upper = f"({entries[-1][0]}"
            count = max(HISTORY_PAGE_FIRST, min(HISTORY_PAGE, count * HISTORY_PAGE_GROWTH,
                                                count * HISTORY_PAGE_BYTES // max(1, size)))
        found.reverse()
        return found[-HISTORY_EVENTS_MAX:]
