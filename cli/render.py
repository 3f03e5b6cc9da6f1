"""What ``dataq-cli`` prints: human text, or with ``--json`` one JSON document per switch per line (JSON Lines).

Every JSON document starts with ``"switch"`` (the long option's name without dashes) and ``"queue"``; the other
keys of each switch are fixed, so scripts can rely on them. Warnings and errors go to stderr as text in both
forms, so stdout stays parseable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click

from dataq.custody.journey import Hop, latencies
from dataq.custody.report import CustodyReport
from dataq.ops.documents import (
    describe_place,
    duration,
    event_doc,
    record_doc,
    unreachable_doc,
    view_doc,
    when,
    worker_doc,
)
from dataq.ops.eta import ActivityEta, Eta
from dataq.ops.health import Rates, Unreachable, replication_problems
from dataq.ops.why import Why
from dataq.record import Record, format_list_line
from dataq.store import ClusterMember, Event, Failures, Flag, RecordView, ReplicationStatus, Summary, Worker

from .journeys import custody_lines, trace_lines

MOVE_MESSAGES = {
    "advance": "Advanced {n} records to next-in-line",
    "deactivate": "Deactivated {n} records",
    "activate": "Activated {n} records",
    "delete": "Deleted {n} records from the {which} queue",
    "redo": "Reactivated {n} records",
}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _failure_suffix(failures: Failures | None) -> str:
    """What ``--list inactive`` adds to a record's line: ``, errors=N[, crashes=N][, error=<last error>]``.

    The error comes last because it is free text (it may hold commas); a record an operator deactivated, which
    never failed, has no ``error=`` part."""
    if failures is None:
        return ", errors=0"
    crashes = f", crashes={failures.crashes}" if failures.crashes else ""
    error = f", error={_one_line(failures.last_error)}" if failures.last_error else ""
    return f", errors={failures.errors}{crashes}{error}"


class Renderer:
    """Prints each switch's outcome for a person or, with ``as_json``, for a script."""

    def __init__(self, queue: str, *, as_json: bool) -> None:
        self.queue = queue
        self.as_json = as_json

    # --- plumbing ---------------------------------------------------------------------------------------

    def _doc(self, switch: str, **fields: Any) -> None:
        click.echo(json.dumps({"switch": switch, "queue": self.queue, **fields}))

    def _text(self, text: str) -> None:
        click.echo(text)

    def warn(self, message: str) -> None:
        click.echo(f"Warning: {message}", err=True)

    # --- state changes ----------------------------------------------------------------------------------

    def flag(self, flag: Flag, on: bool, previous: bool) -> None:
        if self.as_json:
            self._doc(flag.value, on=on, previous=previous)
        else:
            self._text(f"Turned {flag.value} {_on_off(on)} (it was {_on_off(previous)})")

    def cleared(self, count: int, forgotten: int) -> None:
        if self.as_json:
            self._doc("clear", cleared=count, forgot_done=forgotten)
        else:
            self._text(f"Cleared {count} records")
            self._text(f"Forgot {forgotten} remembered done ids")

    def pushed(self, switch: str, record: Record, stored: bool, reply: str) -> None:
        if self.as_json:
            self._doc(switch, pushed=stored, record=record_doc(record))
        else:
            self._text(reply)

    def loaded(self, file: str, loaded: int, duplicates: int) -> None:
        if self.as_json:
            self._doc("load", file=file, loaded=loaded, duplicates=duplicates)
        else:
            self._text(f"Loaded {loaded} records ({duplicates} duplicates ignored)")

    def moved(self, switch: str, count: int, first: str | None = None, last: str | None = None,
              which: str | None = None) -> None:
        if self.as_json:
            fields: dict[str, Any] = {"moved": count}
            if first is not None:
                fields.update(first=first, last=last)
            if which is not None:
                fields["list"] = which
            self._doc(switch, **fields)
        else:
            self._text(MOVE_MESSAGES[switch].format(n=count, which=which))

    # --- listings ---------------------------------------------------------------------------------------

    def dumped(self, file: str, which: str, count: int) -> None:
        if self.as_json:
            self._doc("dump", file=file, list=which, records=count)
        else:
            self._text(f"Dumped {count} records of the {which} list to {file}")

    def list_begin(self, which: str, offset: int, limit: int | None) -> None:
        if self.as_json:
            # The document is streamed: its records are written chunk by chunk as they are read.
            head = json.dumps({"switch": "list", "queue": self.queue, "list": which, "offset": offset,
                               "limit": limit})
            click.echo(head[:-1] + ', "records": [', nl=False)

    def list_chunk(self, records: Sequence[Record], written: int,
                   failures: Mapping[str, Failures] | None = None) -> None:
        """One page of a list; with ``failures`` (the inactive list), each record's failure history too."""
        if not records:
            return
        if self.as_json:
            body = ", ".join(json.dumps(record_doc(r, None if failures is None else failures.get(r.id)))
                             for r in records)
            click.echo((", " if written else "") + body, nl=False)
        elif failures is None:
            click.echo("\n".join(format_list_line(r) for r in records))
        else:
            click.echo("\n".join(format_list_line(r) + _failure_suffix(failures.get(r.id)) for r in records))

    def show(self, view: RecordView) -> None:
        failures = view.failures
        if self.as_json:
            self._doc("show", **view_doc(view))
            return
        record = view.record
        lines = [f"Record {view.record_id} of queue {self.queue}", f"  where:      {describe_place(view)}"]
        if record is not None:
            lines += [f"  path:       {record.path}", f"  size:       {record.size}",
                      f"  pushed:     {when(record.pushed_at)} by {record.source or '-'}"]
        lines += [f"  errors:     {failures.errors}", f"  crashes:    {failures.crashes}",
                  f"  last error: {_one_line(failures.last_error) if failures.last_error else '-'}",
                  f"  events:     {len(view.events)}{' (none left in the stream)' if not view.events else ''}"]
        self._text("\n".join(lines))
        for event in view.events:
            self.event(event)

    def why(self, reason: Why) -> None:
        if self.as_json:
            self._doc("why", **reason.doc())
            return
        self._text(f"{reason.record_id}: {reason.code.value}: {reason.reason}")

    def trace(self, record_id: str, hops: list[Hop]) -> None:
        if self.as_json:
            self._doc("trace", id=record_id, hops=[hop.as_dict() for hop in hops],
                      hop_seconds=latencies(hops))
            return
        self._text("\n".join(trace_lines(record_id, hops)))

    def list_end(self, count: int) -> None:
        if self.as_json:
            click.echo(f'], "count": {count}}}')

    def events(self, events: Iterable[Event]) -> None:
        if self.as_json:
            self._doc("events", events=[event_doc(e) for e in events])
        else:
            for event in events:
                self.event(event)

    def event(self, event: Event) -> None:
        """One event as --follow sees it arrive."""
        if self.as_json:
            self._doc("follow", event=event_doc(event))
        else:
            detail = f"  {event.detail}" if event.detail else ""
            self._text(f"{when(event.time)}  {event.kind:<11} {event.record_id or '-'}{detail}")

    def workers(self, workers: Sequence[Worker], now: float) -> None:
        docs = [worker_doc(w, now) for w in workers]
        if self.as_json:
            self._doc("workers", workers=docs)
            return
        if not docs:
            self._text(f"No worker is registered for queue {self.queue}")
            return
        header = ("WORKER", "HOST", "PID", "SINCE", "HEARTBEAT", "DONE", "FAILED", "RUNNING")
        rows = [header] + [
            (
                str(d["worker"]),
                _dash(d["host"]),
                _dash(d["pid"]),
                when(d["since"]),
                "expired" if not d["alive"] else
                (f"{d['heartbeat_age']:.1f}s ago" if d["heartbeat_age"] is not None else "alive"),
                _dash(d["done"]),
                _dash(d["failed"]),
                _dash(d["running"]),
            )
            for d in docs
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            self._text("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())

    # --- reports ----------------------------------------------------------------------------------------

    def info(self, server: Mapping[str, Any], replication: ReplicationStatus) -> None:
        if self.as_json:
            self._doc("info", server=dict(server), replication=_replication_doc(replication))
        else:
            lines = {**server, **_replication_lines(replication)}
            width = max((len(key) for key in lines), default=0)
            for key, value in lines.items():
                self._text(f"{key + ':':<{width + 1}} {_dash(value)}")

    def health(self, healthy: bool, reason: str, alive: int, registered: int) -> None:
        if self.as_json:
            self._doc("health", healthy=healthy, reason=reason, alive=alive, registered=registered)
        else:
            self._text(f"{'OK' if healthy else 'UNHEALTHY'}: {reason}")

    def summary(self, summary: Summary, alive: int, rates: Rates, eta: Eta,
                replication: ReplicationStatus | None = None, unreachable: Sequence[Unreachable] = (),
                custody: CustodyReport | None = None, activities: Sequence[ActivityEta] = ()) -> None:
        if self.as_json:
            extra: dict[str, Any] = {} if replication is None else {"replication": _replication_doc(replication)}
            extra["eta_seconds"] = eta.doc()["seconds"]
            extra["eta"] = eta.doc()
            if activities:
                extra["activities"] = {a.activity: a.doc() for a in activities}
            if custody is not None:
                extra["custody"] = custody.as_dict(time.time())
            self._doc(
                "summary",
                **extra,
                active=summary.active,
                inactive=summary.inactive,
                delayed=summary.delayed,
                in_flight=summary.in_flight,
                tracked=summary.tracked,
                action=summary.action,
                read=summary.read,
                workers=summary.workers,
                alive_workers=alive,
                unreachable=[unreachable_doc(u) for u in unreachable],
                counters=summary.counters,
                rates={
                    **{f"{kind}_per_minute": round(value, 3) for kind, value in rates.per_minute.items()},
                    "window_seconds": rates.window,
                    "covered_seconds": round(rates.covered, 3),
                    "complete": rates.complete,
                },
            )
            return
        per_minute = ", ".join(f"{value:.1f} {kind}" for kind, value in rates.per_minute.items())
        span = (
            f"over the last {rates.covered:.0f} s"
            if rates.complete
            else f"over the last {rates.covered:.1f} s only: counting began then"
        )
        lines = [
            f"Queue {summary.queue}",
            f"  active:    {summary.active}",
            f"  inactive:  {summary.inactive}",
            f"  in flight: {summary.in_flight}",
            f"  delayed:   {summary.delayed} (waiting to retry)",
            f"  tracked:   {summary.tracked} records",
            f"  action:    {_on_off(summary.action)}",
            f"  read:      {_on_off(summary.read)}",
            f"  workers:   {alive} live ({summary.workers} registered)",
            f"  rates:     {per_minute} per minute ({span})",
            f"  eta:       {eta.describe()}",
        ]
        lines += [f"  activity {a.activity}: {a.active} queued, {a.done} done; eta {a.eta.describe()}"
                  for a in activities]
        lines += [f"  unreachable: {u.destination} since {when(u.since)} ({duration(time.time() - u.since)}), "
                  f"{u.waiting} records waiting; last error: {_one_line(u.error)}" for u in unreachable]
        if custody is not None:
            lines += custody_lines(custody)
        if replication is not None:
            lines += [f"  {key + ':':<10} {value}" for key, value in _replication_lines(replication).items()]
            lines += [f"  warning:   {problem}" for problem in replication_problems(replication)]
        self._text("\n".join(lines))


def _replication_lines(status: ReplicationStatus) -> dict[str, str]:
    replicas = ", ".join(f"{r.address} {r.state} (lag {r.lag_bytes} B, {_dash(r.lag_seconds)} s)"
                         for r in status.replicas) or "none"
    lines = {"master": status.master, "replicas": f"{replicas}; min_replicas {status.min_replicas}"}
    if status.sentinels is not None:
        seen = ", ".join(f"{address} {'up' if up else 'DOWN'}" for address, up in status.sentinels.items())
        lines["sentinels"] = f"{status.sentinels_up} of {len(status.sentinels)} answer: {seen}"
    if status.cluster is not None:
        cluster = status.cluster
        lines["cluster"] = (f"{cluster.masters} masters, {len(cluster.members) - cluster.masters} replicas; "
                            f"the queue is in slot {cluster.slot} on {status.master}")
        for index, member in enumerate(cluster.members):
            lines[f"node {index + 1}"] = _member_line(member)
    return lines


def _member_line(member: ClusterMember) -> str:
    role = f"master of slots {member.slots or 'none'}" if member.master is None else f"replica of {member.master}"
    marks = (" (holds the queue)" if member.holds_queue else "") + ("" if member.up else " DOWN")
    return f"{member.address} {role}{marks}"


def _replication_doc(status: ReplicationStatus) -> dict[str, Any]:
    return {
        "master": status.master,
        "min_replicas": status.min_replicas,
        "replicas": [{"address": r.address, "state": r.state, "lag_bytes": r.lag_bytes,
                      "lag_seconds": r.lag_seconds} for r in status.replicas],
        "sentinels": status.sentinels,
        "cluster": None if status.cluster is None else {
            "slot": status.cluster.slot,
            "nodes": [{"address": m.address, "role": m.role, "master": m.master, "slots": m.slots, "up": m.up,
                       "holds_queue": m.holds_queue} for m in status.cluster.members],
        },
        "problems": replication_problems(status),
    }


def _on_off(on: bool) -> str:
    return "on" if on else "off"


def _dash(value: object) -> str:
    return "-" if value is None else str(value)
