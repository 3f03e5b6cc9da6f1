"""Why a record is not done yet, in one line with its next step (``dataq-cli --why ID``).

Each reason has a code, the same wherever it is shown (``--why``, its ``--json``), and the fields it is made of:

======================  ===================================================================================
``queued``              in the active list, behind ``ahead`` records; it runs when they have
``paused``              in the active list, and the queue's actions are off (``dataq-cli --action on``)
``no_worker``           in the active list, and no pop daemon of the queue is alive to run it
``unreachable``         in the active list, and a destination is unreachable since ``since``: the pop daemons
                        probe it (the next probe at ``next_probe``) and run nothing meanwhile
``outside_window``      in the active list, and a destination is outside its ``windows`` until ``opens``
``running``             claimed by ``worker`` (since ``since``, when its events tell)
``backing_off``         delayed until ``until`` after failure ``errors`` of ``max_errors``: ``error``
``inactive``            failed ``errors`` times (``error``): it waits for an operator (``--activate ID ID``)
``custody``             done here and handed on to ``site`` at ``since``, waiting for the end of the chain
``done``                done (at ``at``; ``confirmed``: when the end of the chain had it)
``lost``                done once, its stored copy found missing or damaged by an audit (``why``)
``unknown``             this site does not know it
======================  ===================================================================================

The reason is made from what the store says of the record (:meth:`~dataq.store.QueueStore.show`, and for one it
no longer tracks, :meth:`~dataq.store.QueueStore.whereabouts`), the queue's flags and the pop daemons'
heartbeats, in a few round trips when an operator asks: the daemons never call it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataq.ops.documents import WAITING_KEY, when
from dataq.ops.holds import Hold, what_holds
from dataq.store import CustodyEntry, Flag, Known, Lost, QueueStore, RecordView, Worker
from dataq.store.remembered import Done


class WaitCode(enum.StrEnum):
    QUEUED = "queued"
    PAUSED = "paused"
    NO_WORKER = "no_worker"
    UNREACHABLE = "unreachable"
    OUTSIDE_WINDOW = "outside_window"
    RUNNING = "running"
    HELD = "held"
    BACKING_OFF = "backing_off"
    INACTIVE = "inactive"
    CUSTODY = "custody"
    DONE = "done"
    LOST = "lost"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Why:
    """Why record ``record_id`` is where it is: a code, one line for people, and the fields it is made of."""

    record_id: str
    code: WaitCode
    reason: str
    fields: Mapping[str, Any] = field(default_factory=dict)

    def doc(self) -> dict[str, Any]:
        return {"id": self.record_id, "code": self.code.value, "reason": self.reason, **self.fields}


async def why(store: QueueStore, record_id: str, max_errors: int, now: float | None = None) -> Why:
    """Why ``record_id`` is not done yet at this site (a queue whose records go inactive after ``max_errors``)."""
    view = await store.show(record_id)
    (known,) = await store.whereabouts([record_id], max_errors) if view.record is None else (None,)
    flags = await store.flags()
    workers = await store.workers() if view.where in ("active", "in-flight") else []
    return reason_of(view, known, flags, workers, max_errors, time.time() if now is None else now)


def reason_of(view: RecordView, known: Known, flags: Mapping[Flag, bool], workers: Sequence[Worker],
              max_errors: int, now: float) -> Why:
    """The reason, from what the store says of the record (``known``: of one it no longer tracks)."""
    record_id, failures = view.record_id, view.failures
    if view.where == "active":
        return _queued(view, flags, workers, now)
    if view.where == "in-flight":
        claimed = next((event.time for event in reversed(view.events) if event.kind == "claimed"), None)
        if view.worker is None:
            return Why(record_id, WaitCode.RUNNING, "being claimed or given back: between two lists for a moment",
                       {"worker": None, "since": claimed})
        held = _held(record_id, view.worker, workers)
        if held is not None:
            destination, limit = held
            return Why(record_id, WaitCode.HELD, f"on {view.worker}, waiting for a connection to {destination}: "
                       f"{limit} may be open at once (max_connections); it runs when one ends",
                       {"worker": view.worker, "since": claimed, "destination": destination, "max_connections": limit})
        return Why(record_id, WaitCode.RUNNING, f"on {view.worker}"
                   + (f" since {when(claimed)}" if claimed is not None else ""),
                   {"worker": view.worker, "since": claimed})
    if view.where == "delayed":
        return Why(record_id, WaitCode.BACKING_OFF,
                   f"until {when(view.due)} after failure {failures.errors} of {max_errors}: "
                   f"{_one_line(failures.last_error)}; it runs again then",
                   {"until": view.due, "errors": failures.errors, "max_errors": max_errors,
                    "error": failures.last_error})
    if view.where == "inactive":
        return Why(record_id, WaitCode.INACTIVE,
                   f"after {failures.errors} failures: {_one_line(failures.last_error)}; to run it "
                   f"again: dataq-cli --activate {record_id} {record_id} (every inactive record: --redo)",
                   {"errors": failures.errors, "error": failures.last_error})
    return _untracked(view, known, flags)


def _held(record_id: str, worker: str, workers: Sequence[Worker]) -> tuple[str, int] | None:
    """The destination and its limit, when the worker that holds the record says it waits for a connection."""
    beat = next((w.heartbeat for w in workers if w.worker_id == worker), None) or {}
    found = beat.get(WAITING_KEY)
    for destination, waiting in (found.items() if isinstance(found, dict) else ()):
        if isinstance(waiting, dict) and record_id in waiting.get("ids", ()):
            return str(destination), int(waiting.get("max_connections", 0))
    return None


def _queued(view: RecordView, flags: Mapping[Flag, bool], workers: Sequence[Worker], now: float) -> Why:
    record_id = view.record_id
    ahead = (view.place or 1) - 1
    fields: dict[str, Any] = {"ahead": ahead, "place": view.place, "active": view.active_length}
    activity = view.record.activity if view.record is not None else None
    behind = f"{ahead:,} record{'' if ahead == 1 else 's'} ahead of it"
    if activity is not None:
        # With activities, the place is in its activity's run order; activities served first may go before.
        fields.update(activity=activity, before=view.before)
        behind += f" in activity {activity}" + (
            f" (and {view.before:,} queued in activities served before it)" if view.before else "")
    held = what_holds(flags.get(Flag.ACTION, True), workers)
    if held is None:
        return Why(record_id, WaitCode.QUEUED, f"{behind} (place {view.place:,} of {view.active_length:,} "
                                               "in run order); it runs when they have", fields)
    more = held.fields
    if held.hold is Hold.PAUSED:
        text = f"the queue's actions are off, {behind}; to run them: dataq-cli --action on"
    elif held.hold is Hold.NO_WORKER:
        text = f"{behind}, but no pop daemon of the queue is running: start one (dataq pop, or systemctl start dataq)"
    elif held.hold is Hold.OUTSIDE_WINDOW:
        text = (f"destination {more['destination']} is used only in its windows ({more['windows']}): claiming "
                f"starts again at {when(more['opens'])}, {behind}")
    else:
        probe = more["next_probe"]
        text = (f"destination {more['destination']} unreachable since {when(more['since'])} "
                f"({_one_line(more['error'])}); the next probe "
                + (f"at {when(probe)}" if probe is not None and probe > now else "is due now")
                + f", then the queue runs again, {behind}")
    return Why(record_id, WaitCode(held.hold.value), text, {**fields, **more})


def _untracked(view: RecordView, known: Known, flags: Mapping[Flag, bool]) -> Why:
    record_id = view.record_id
    if isinstance(known, CustodyEntry):
        if not known.site:
            return Why(record_id, WaitCode.CUSTODY, f"done here at {when(known.handed_at)}, waiting in the hand-on "
                                                    "spool to be sent to the next site", {"site": "",
                                                                                          "since": known.handed_at})
        heard = known.last.describe() if known.last is not None else "nothing yet"
        return Why(record_id, WaitCode.CUSTODY,
                   f"handed on to {known.site} at {when(known.handed_at)}, waiting for the end of the "
                   f"chain to have it (last heard: {heard})",
                   {"site": known.site, "since": known.handed_at, "heard": heard})
    if isinstance(known, Done):
        confirmed = known.end_at
        return Why(record_id, WaitCode.DONE, f"at {when(known.done_at)}"
                   + (f", at the end of the chain at {when(confirmed)}" if confirmed is not None else ""),
                   {"at": known.done_at, "confirmed": confirmed})
    if isinstance(known, Lost):
        return Why(record_id, WaitCode.LOST,
                   f"done once, then marked lost at {when(known.at)} ({known.why}); to send it again: "
                   "dataq audit --repair DIR at the site that holds its file, or push it again with --again",
                   {"at": known.at, "why": known.why})
    if view.where == "done":
        done = next((event.time for event in reversed(view.events) if event.kind == "done"), None)
        return Why(record_id, WaitCode.DONE, f"at {when(done)} (its events say so; no longer remembered)",
                   {"at": done, "confirmed": None})
    reading = "" if flags.get(Flag.READ, True) else "; reading feeders is off (dataq-cli --read on)"
    return Why(record_id, WaitCode.UNKNOWN, "this site does not know it: never pushed here, cleared or deleted, or "
                                            f"done longer ago than remember_done{reading}", {})


def _one_line(text: str | None) -> str:
    return " ".join(text.split()) if text else "no error recorded"

