"""What the web console shows and does, as JSON-ready documents: one store per configured queue, read and moved
through the same library calls as ``dataq-cli`` (:mod:`dataq.ops`), so both agree on every number."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dataq.config import Settings
from dataq.custody.report import chain_of, custody_report
from dataq.errors import DataqError
from dataq.ops.documents import describe_place, event_doc, record_doc, unreachable_doc, view_doc, worker_doc
from dataq.ops.eta import activity_etas, queue_eta
from dataq.ops.health import rates, unreachable_destinations
from dataq.ops.why import Why, why
from dataq.store import Flag, QueueList, QueueStore

PAGE_SIZE = 50
"""Records per page of the active and inactive lists."""
MAX_PAGE_SIZE = 1_000
EVENTS_SHOWN = 50
MOVES = ("activate", "deactivate", "advance")
"""The range moves the console offers, by the name of the store method."""


class NotFound(DataqError):
    """A queue the settings do not configure, or a record no queue holds."""


class BadRequest(DataqError):
    """An action's parameters are missing or malformed."""


@dataclass(frozen=True, slots=True)
class Page:
    offset: int
    limit: int

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Page:
        try:
            offset, limit = int(query.get("offset", 0)), int(query.get("limit", PAGE_SIZE))
        except ValueError as exc:
            raise BadRequest("offset and limit must be whole numbers") from exc
        if offset < 0 or not 1 <= limit <= MAX_PAGE_SIZE:
            raise BadRequest(f"offset must be 0 or more and limit between 1 and {MAX_PAGE_SIZE}")
        return cls(offset, limit)


class Console:
    """The console's view of every configured queue."""

    def __init__(self, settings: Settings, stores: Mapping[str, QueueStore]) -> None:
        self.settings = settings
        self.stores = dict(stores)

    def store(self, queue: str) -> QueueStore:
        store = self.stores.get(queue)
        if store is None:
            raise NotFound(f"no queue {queue!r}; the queues are: {', '.join(self.stores)}")
        return store

    # --- reading -------------------------------------------------------------------------------------------

    async def queues(self) -> list[dict[str, Any]]:
        return [await self.queue(name) for name in self.stores]

    async def queue(self, queue: str) -> dict[str, Any]:
        """Counts, flags, live workers, rates of the last minute, when the backlog will be done and unreachable
        destinations."""
        store = self.store(queue)
        summary = await store.summary()
        workers = await store.workers()
        recent = await rates(store)
        custody = await custody_report(store, summary, workers)
        eta = await queue_eta(store, summary, workers)
        activities = await activity_etas(store, summary, workers)
        return {
            "name": queue, "active": summary.active, "inactive": summary.inactive, "in_flight": summary.in_flight,
            "delayed": summary.delayed, "tracked": summary.tracked, "action": summary.action, "read": summary.read,
            "workers": sum(1 for worker in workers if worker.heartbeat is not None),
            "registered": summary.workers,
            "rates": {**{f"{kind}_per_minute": round(value, 3) for kind, value in recent.per_minute.items()},
                      "covered_seconds": round(recent.covered, 3), "complete": recent.complete},
            "eta": eta.describe(), "eta_seconds": eta.doc()["seconds"],
            "activities": [{"name": a.activity, "active": a.active, "done": a.done,
                            "done_per_minute": round(a.eta.done_per_minute, 3), "eta": a.eta.describe(),
                            "eta_seconds": a.eta.doc()["seconds"]} for a in activities],
            "unreachable": [unreachable_doc(u) for u in
                            unreachable_destinations(workers, summary.active + summary.delayed)],
            "counters": summary.counters,
            "site": self.settings.site,
            "custody": None if custody is None else custody.as_dict(time.time()),
            "chain": [] if custody is None else
                     [hop.as_dict() for hop in await chain_of(store, self.settings.site, summary)],
        }

    async def workers(self, queue: str) -> list[dict[str, Any]]:
        now = time.time()
        return [worker_doc(worker, now) for worker in await self.store(queue).workers()]

    async def inactive(self, queue: str, page: Page) -> list[dict[str, Any]]:
        """Inactive records, newest first, with their error count and last error."""
        store = self.store(queue)
        records = await store.list_records(QueueList.INACTIVE, page.offset, page.limit)
        failures = await store.failures([record.id for record in records])
        return [record_doc(record, failures.get(record.id)) for record in records]

    async def active(self, queue: str, page: Page) -> list[dict[str, Any]]:
        """Active records in the list's order (newest first; the last runs next)."""
        records = await self.store(queue).list_records(QueueList.ACTIVE, page.offset, page.limit)
        return [record_doc(record) for record in records]

    async def events(self, queue: str, count: int = EVENTS_SHOWN) -> list[dict[str, Any]]:
        """The latest events, newest first."""
        return [event_doc(event) for event in reversed(await self.store(queue).events(count))]

    async def history(self, queue: str) -> dict[str, Any]:
        """Counts per 10-second bucket over the last hour, for the rate plots."""
        ring = await self.store(queue).rate_history()
        return {"now": ring.now, "since": ring.since,
                "buckets": [{"start": bucket.start, **bucket.counts} for bucket in ring.buckets]}

    async def record(self, record_id: str, queue: str | None = None) -> dict[str, Any]:
        """What ``dataq-cli --show`` shows, from the queue that tracks the record (or, failing that, the first
        whose events still name it)."""
        names = [queue] if queue is not None else list(self.stores)
        views = [(name, await self.store(name).show(record_id)) for name in names]
        for wanted in (lambda where: where not in ("done", "unknown"), lambda where: where != "unknown"):
            for name, view in views:
                if wanted(view.where):
                    reason = await self._why(name, record_id)
                    return {"queue": name, **view_doc(view), "description": describe_place(view),
                            "why": reason.doc()}
        raise NotFound(f"no queue tracks record {record_id!r}, and no event of it is left")

    async def _why(self, queue: str, record_id: str) -> Why:
        """Why the record is not done yet, with its code, as ``dataq-cli --why`` says it."""
        max_errors = self.settings.queue(queue).max_errors if queue in self.settings.queues else 0
        return await why(self.store(queue), record_id, max_errors)

    # --- the operator's actions ----------------------------------------------------------------------------

    async def set_flag(self, queue: str, flag: Flag, on: bool) -> dict[str, Any]:
        await self.store(queue).set_flag(flag, on, who="web")
        return {"queue": queue, "flag": flag.value, "on": on}

    async def redo(self, queue: str) -> dict[str, Any]:
        """Every inactive record back to the active queue."""
        return {"queue": queue, "moved": await self.store(queue).activate_all()}

    async def move(self, queue: str, how: str, first: str, last: str) -> dict[str, Any]:
        """``activate`` (inactive -> active), ``deactivate`` (active -> inactive) or ``advance`` (to next in line)
        the records from id ``first`` to id ``last``, as ``dataq-cli`` does."""
        if how not in MOVES:
            raise BadRequest(f"unknown move {how!r}; one of {', '.join(MOVES)}")
        if not first or not last:
            raise BadRequest("a range needs a first and a last record id")
        moved: int = await getattr(self.store(queue), how)(first, last)
        return {"queue": queue, "moved": moved}

    async def retry(self, queue: str, record_id: str) -> dict[str, Any]:
        """One inactive record back to the active queue, its failures forgotten."""
        return await self.move(queue, "activate", record_id, record_id)
