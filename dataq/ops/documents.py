"""The JSON shapes of records, events, workers and a record's view: ``dataq-cli --json`` prints them and the web
console's API serves them, so a script reads the same keys from either."""

from __future__ import annotations

import math
import time
from typing import Any

from dataq.ops.health import Unreachable
from dataq.record import Record
from dataq.store import Event, Failures, RecordView, Worker


def when(timestamp: object) -> str:
    """A wall-clock time as local ``YYYY-mm-dd HH:MM:SS.mmm``; ``-`` for none."""
    if not isinstance(timestamp, (int, float)) or not math.isfinite(timestamp):
        return "-"
    try:
        whole = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))
    except (OverflowError, OSError, ValueError):  # a time no calendar holds (a peer's answer may say anything)
        return "-"
    return f"{whole}.{int(timestamp * 1000) % 1000:03d}"


def duration(seconds: float) -> str:
    """``42 s``, ``7 min``, ``3.5 h``, ``2.1 d``: how long, at a glance."""
    if seconds < 120:
        return f"{max(0.0, seconds):.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def record_doc(record: Record, failures: Failures | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "checksum": record.checksum,
        "path": record.path,
        "size": record.size,
        "pushed_at": record.pushed_at,
        "source": record.source,
    }
    if record.activity is not None:
        doc["activity"] = record.activity
    if failures is not None:
        doc.update(errors=failures.errors, crashes=failures.crashes, last_error=failures.last_error)
    return doc


def event_doc(event: Event) -> dict[str, Any]:
    return {
        "id": event.event_id,
        "time": event.time,
        "kind": event.kind,
        "record": event.record_id,
        "detail": event.detail,
    }


HELD_BACK_KEY = "connections_held_back"
"""The heartbeat key (and ``--workers --json`` key) under which a pop daemon reports the destinations whose rsync
daemon takes fewer of ``network_move``'s calls at once than it would open (``max connections``): destination ->
``{"at_once": n, "most": m}``."""
OPEN_KEY = "connections_open"
"""The heartbeat key under which a pop daemon reports the rsync calls open to each destination of ``network_move``
and the most it would open: destination -> ``{"open": n, "most": m}``."""
TUNING_KEY = "batch_tuning"
"""The heartbeat key (and ``--workers --json`` key) of ``network_move``'s transfer tuner, per destination: its
batch size and bounds, the link's fitted overhead and rate, the round trip its daemon's greeting showed, and its
last decision with when."""
WAITING_KEY = "waiting_for_connection"
"""The heartbeat key under which a pop daemon names the records in flight that wait for a connection to a
destination its ``max_connections`` limits: destination -> ``{"max_connections": n, "open": k, "ids": [...]}``."""


def worker_doc(worker: Worker, now: float) -> dict[str, Any]:
    beat = worker.heartbeat or {}
    at = beat.get("at")
    return {
        "worker": worker.worker_id,
        "role": worker.info.get("role"),
        "host": worker.info.get("host"),
        "pid": worker.info.get("pid"),
        "since": worker.info.get("started"),
        "alive": worker.heartbeat is not None,
        "heartbeat_age": round(now - at, 3) if isinstance(at, (int, float)) else None,
        "done": beat.get("done"),
        "failed": beat.get("failed"),
        "running": beat.get("running"),
        HELD_BACK_KEY: beat.get(HELD_BACK_KEY) or {},
    }


def unreachable_doc(outage: Unreachable) -> dict[str, Any]:
    return {"destination": outage.destination, "since": outage.since, "waiting": outage.waiting,
            "error": outage.error, "workers": list(outage.workers)}


def view_doc(view: RecordView) -> dict[str, Any]:
    """Everything about one record (``--show``)."""
    failures = view.failures
    return {
        "record": view.record_id, "where": view.where, "place": view.place, "active_length": view.active_length,
        "worker": view.worker, "due": view.due, "fields": None if view.record is None else record_doc(view.record),
        "errors": failures.errors, "crashes": failures.crashes, "last_error": failures.last_error,
        "events": [event_doc(e) for e in view.events],
    }


def describe_place(view: RecordView) -> str:
    """Where a record stands, in words (``dataq-cli --show``, the console's record page)."""
    if view.where == "active":
        return f"active, {view.place} of {view.active_length} in the run order (1 runs next)"
    if view.where == "in-flight":
        return f"in flight, held by worker {view.worker or '(none found: being moved)'}"
    if view.where == "delayed":
        return f"delayed until {when(view.due)}"
    if view.where == "done":
        return "done (acknowledged: no longer tracked)"
    if view.where == "unknown":
        return "unknown: not tracked, and no event of it is left in the stream"
    return view.where
