"""What the web console shows and does, as JSON-ready documents: one store per configured queue, read and moved
through the same library calls as ``dataq-cli`` (:mod:`dataq.ops`), so both agree on every number."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from dataq.config import Settings
from dataq.custody.desk import ReceiptDesk
from dataq.custody.journey import Tracer, latencies
from dataq.custody.report import chain_of, custody_report
from dataq.errors import DataqError, InvalidRecord, StoreUnavailable
from dataq.ops.conditions import activity_condition, conditions_of, read_vitals, redis_down
from dataq.ops.documents import describe_place, event_doc, record_doc, unreachable_doc, view_doc, worker_doc
from dataq.ops.eta import activity_etas, queue_eta
from dataq.ops.health import rates
from dataq.ops.why import WaitCode, Why, why
from dataq.record import DEFAULT_RULES, parse_line
from dataq.store import Flag, NameQuery, QueueList, QueueStore, RecordView
from dataq.web.destinations import destinations
from dataq.web.feeders import feeders
from dataq.web.plot import Span, View, age_plot, backlog_plot, bytes_plot, rate_plot
from dataq.web.repairs import Repairs
from dataq.web.search import Search

PAGE_SIZE = 50
"""Records per page of the active and inactive lists."""
MAX_PAGE_SIZE = 1_000
EVENTS_SHOWN = 50
AUDIT_FIELDS: dict[str, Any] = {"at": None, "site": "", "seconds": None, "files": 0, "counts": {}, "repaired": 0,
                                "findings": [], "findings_total": 0}
"""What the console shows of an audit, for one kept before findings were (or by an older dataq)."""
JOURNEY_WITHIN = 5.0
"""Seconds the record page waits for each next site's answer at most (a site down must not hold the page)."""
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
        self.tracers: dict[str, Tracer] = {}
        self.repairs = Repairs(settings)

    def store(self, queue: str) -> QueueStore:
        store = self.stores.get(queue)
        if store is None:
            raise NotFound(f"no queue {queue!r}; the queues are: {', '.join(self.stores)}")
        return store

    # --- reading -------------------------------------------------------------------------------------------

    async def queues(self) -> list[dict[str, Any]]:
        """Every queue's document; a queue whose Redis does not answer is shown as such, not as an error page."""
        found = []
        for name in self.stores:
            try:
                found.append(await self.queue(name))
            except StoreUnavailable as exc:
                conditions = [item.doc() for item in redis_down(str(exc))]
                found.append({"name": name, "state": conditions[0], "conditions": conditions, "reachable": False,
                              "activities": []})
        return found

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
        vitals = await read_vitals(store, summary, workers, self.settings.health)
        found = conditions_of(vitals, self.settings.health)
        conditions = [item.doc() for item in found]
        queued = await store.oldest_queued() if activities else {}
        return {
            "name": queue, "reachable": True, "state": conditions[0], "conditions": conditions,
            "backlog_age_seconds": vitals.backlog_age, "done_bytes_per_second": round(vitals.done_bytes_per_second),
            "active": summary.active, "inactive": summary.inactive, "in_flight": summary.in_flight,
            "delayed": summary.delayed, "tracked": summary.tracked, "action": summary.action, "read": summary.read,
            "workers": sum(1 for worker in workers if worker.heartbeat is not None),
            "registered": summary.workers,
            "rates": {**{f"{kind}_per_minute": round(value, 3) for kind, value in recent.per_minute.items()},
                      "covered_seconds": round(recent.covered, 3), "complete": recent.complete},
            "eta": eta.describe(), "eta_seconds": eta.doc()["seconds"],
            "activities": [{"name": a.activity, "active": a.active, "done": a.done,
                            "done_per_minute": round(a.eta.done_per_minute, 3), "eta": a.eta.describe(),
                            "eta_seconds": a.eta.doc()["seconds"],
                            "backlog_age_seconds": None if a.activity not in queued
                            else round(max(0.0, vitals.now - queued[a.activity]), 3),
                            "state": activity_condition(found, vitals.now, a.active, a.eta.done_per_minute,
                                                        queued.get(a.activity), self.settings.health).doc()}
                           for a in activities],
            "unreachable": [unreachable_doc(u) for u in vitals.unreachable],
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

    async def history(self, queue: str, span: str = Span.HOUR, activity: str | None = None) -> dict[str, Any]:
        """Counts per bucket over the last hour (10-second buckets) or day (5-minute ones), for the plots, with
        the records tracked now (what the records-not-done plot counts back from); with ``activity``, that
        activity's ring (its records pushed and done, bytes done and the age of its next record)."""
        if span not in tuple(Span):
            raise BadRequest(f"span must be one of {', '.join(Span)}, not {span!r}")
        store = self.store(queue)
        summary = await store.summary()
        if activity is not None and activity not in summary.activities:
            raise NotFound(f"queue {queue!r} has no activity {activity!r}")
        ring = await (store.rate_history(activity=activity) if span == Span.HOUR else store.day_history(activity))
        # What the records-not-done plot counts back from: every record tracked; of an activity, those queued (the
        # records of an activity in flight, delayed or inactive are not told apart).
        tracked = summary.tracked if activity is None else summary.activities[activity]
        return {"now": ring.now, "since": ring.since, "bucket_seconds": ring.bucket_seconds, "span": span,
                "tracked": tracked,
                "buckets": [{"start": bucket.start, **bucket.counts, **bucket.levels} for bucket in ring.buckets]}

    async def plot(self, queue: str, view: str, span: str, activity: str | None = None) -> str:
        """One plot of the queue (or of one of its activities) as SVG (:mod:`.plot`)."""
        if view not in tuple(View):
            raise BadRequest(f"view must be one of {', '.join(View)}, not {view!r}")
        history = await self.history(queue, span, activity)
        buckets, seconds, over = history["buckets"], history["bucket_seconds"], Span(span)
        if view == View.BYTES:
            return bytes_plot(buckets, seconds, over)
        if view == View.BACKLOG:
            return backlog_plot(buckets, history["tracked"], over)
        if view == View.AGE:
            return age_plot(buckets, over)
        return rate_plot(buckets, seconds, over)

    async def record(self, record_id: str, queue: str | None = None) -> dict[str, Any]:
        """What ``dataq-cli --show`` and ``--why`` say, from the queue that tracks the record (or, failing that,
        the first whose events still name it, or that remembers it: done, lost or handed on)."""
        names = [queue] if queue is not None else list(self.stores)
        views = [(name, await self.store(name).show(record_id)) for name in names]
        for wanted in (lambda where: where not in ("done", "unknown"), lambda where: where != "unknown"):
            for name, view in views:
                if wanted(view.where):
                    return await self._record_doc(name, view)
        for name, view in views:
            reason = await self._why(name, record_id)
            if reason.code is not WaitCode.UNKNOWN:
                return await self._record_doc(name, view, reason)
        raise NotFound(f"no queue tracks record {record_id!r}, remembers it, or has an event of it left")

    async def _record_doc(self, queue: str, view: RecordView, reason: Why | None = None) -> dict[str, Any]:
        reason = reason or await self._why(queue, view.record_id)
        return {"queue": queue, **view_doc(view), "description": describe_place(view), "why": reason.doc()}

    async def indexed(self, queue: str, record_id: str, name: str) -> dict[str, Any] | None:
        """The path and size the names index holds for a record it found under ``name`` (a record no longer
        tracked keeps no path anywhere else): what sending it again needs."""
        hit = await self.store(queue).find_id(record_id, NameQuery(name))
        return None if hit is None else {"path": hit.path, "size": hit.size}

    async def journey(self, record_id: str, queue: str) -> list[dict[str, Any]]:
        """The record's way across the sites, as ``dataq-cli --trace`` follows it (each next site asked over the
        wire, within a few seconds)."""
        store = self.store(queue)
        tracer = self.tracers.get(queue)
        if tracer is None:
            from dataq.actions.chain_link import chain_link  # actions import the console's packages, not back

            settings = self.settings.queue(queue) if queue in self.settings.queues else None
            link = chain_link(self.settings, settings) if settings is not None else None
            desk = ReceiptDesk(self.settings.site, settings.max_errors if settings else 0,
                               link.next_sites if link else ())
            tracer = Tracer(desk, link.tls if link else None, min(link.timeout if link else 0.0, JOURNEY_WITHIN))
            self.tracers[queue] = tracer
        hops = await tracer.trace(store, record_id)
        return [{**hop.as_dict(), "lag_seconds": lag} for hop, lag in zip(hops, latencies(hops), strict=True)]

    async def search(self, text: str) -> list[dict[str, Any]]:
        """Records found by id, file name, glob or path in every queue (:mod:`.search`)."""
        return [hit.doc() for hit in await Search(self.settings, self.stores).run(text)]

    async def send_again(self, queue: str, record_id: str, path: str, size: str) -> dict[str, Any]:
        """Push a record again on purpose (``dataq-cli --pushstr ... --again``): moved again even if done lately,
        and handed on marked so."""
        rules = self.settings.queue(queue).rules if queue in self.settings.queues else DEFAULT_RULES
        digits = re.fullmatch(r"[0-9]{1,20}", size) is not None
        line = json.dumps({"path": path, "checksum": record_id, "size": int(size) if digits else size})
        try:
            record = replace(parse_line(line, rules), again=True)
        except InvalidRecord as exc:
            raise BadRequest(f"not a record to send again: {exc}") from exc
        result = await self.store(queue).push_batch([record], "web")
        return {"queue": queue, "moved": sum(result.pushed), "again": record_id}

    async def _why(self, queue: str, record_id: str) -> Why:
        """Why the record is not done yet, with its code, as ``dataq-cli --why`` says it."""
        max_errors = self.settings.queue(queue).max_errors if queue in self.settings.queues else 0
        return await why(self.store(queue), record_id, max_errors)

    async def destinations(self, queue: str) -> list[dict[str, Any]]:
        """Each destination of the queue: its state, connections, the tuner's last decision, its limits."""
        settings = self.settings.queue(queue) if queue in self.settings.queues else None
        return destinations(settings, await self.store(queue).workers())

    async def audits(self, queue: str) -> list[dict[str, Any]]:
        """The last audit of each directory and storing root of the queue, with its findings kept and the last
        repair started here."""
        repairs = self.repairs.of(queue)
        return [{**AUDIT_FIELDS, **result, "target": target,
                 "repair": repairs[target].doc() if target in repairs else None}
                for target, result in sorted((await self.store(queue).audits()).items())]

    async def feeders(self) -> list[dict[str, Any]]:
        """The feeders reporting to this site (:mod:`.feeders`)."""
        return [view.doc() for view in await feeders(self.settings)]

    # --- the operator's actions ----------------------------------------------------------------------------

    async def repair(self, queue: str, target: str, who: str) -> dict[str, Any]:
        """Start ``dataq audit --repair`` for one audited target (:mod:`.repairs`)."""
        run = await self.repairs.start(queue, target, await self.store(queue).audits(), who)
        return {"queue": queue, "moved": 0, **run.doc()}

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
