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

HISTORY_PAGE = 1000
"""Stream entries read per round trip when looking for one record's events."""
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
        events = await self._history(record_id)
        record = None if value is None else decode_stored(record_id, value)
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

    async def _history(self, record_id: str) -> list[Event]:
        """The record's events, oldest first (the newest :data:`HISTORY_EVENTS_MAX`)."""
        found: list[Event] = []
        upper = "+"
        while len(found) < HISTORY_EVENTS_MAX:
            entries = await self.r.xrevrange(self.keys.events, max=upper, count=HISTORY_PAGE)
            for entry_id, fields in entries:
                if record_id in fields.get("id", ""):  # cheap test first: most entries are other records'
                    found += [event for event in self._events(entry_id, fields) if event.record_id == record_id]
            if len(entries) < HISTORY_PAGE:
                break
            upper = f"({entries[-1][0]}"
        found.reverse()
        return found[-HISTORY_EVENTS_MAX:]
