"""A queue's conditions: what is wrong with it now, in words, with the alert rule that says the same.

The web console shows them as a queue's state (the worst of them, coloured by its severity). Each condition is the
expression of one alert rule of ``config/prometheus/dataq-rules.yml``, evaluated on what that rule's metrics are
read from (the same store calls the daemons' gauges are built from: :mod:`dataq.ops.metrics`), with the rule's
threshold as its default (:class:`~dataq.config.HealthSettings`), so that the page and Prometheus agree. Where a
rule needs a history Prometheus keeps and dataq does not, the condition reads the rates ring instead:

* growing: the rule takes the slope of the active list over an hour; here, records pushed less records done over
  the ring's hour (the slope of the list, but for records that failed for good or were moved by an operator);
* stalled: the rule wants nothing done for 15 minutes, held for 5; here, nothing done within ``stalled_after``
  while the oldest active record has waited as long (a queue that just took its first record is not stalled).

A rule's ``for`` (how long it must hold before it fires) is Prometheus's: the page shows a condition as soon as it
holds, with how long it has (where that is known), and the alert follows after its ``for``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataq.config import HealthSettings
from dataq.ops.documents import duration
from dataq.ops.health import (
    OutsideWindow,
    Unreachable,
    outside_windows,
    replication_problems,
    unreachable_destinations,
)
from dataq.store import QueueStore, Worker
from dataq.store.types import Summary

BAD_AUDIT_CLASSES = ("lost", "failed", "never_fed", "missing_copy", "corrupt_copy", "unreadable")
"""The classes of an audit's files that count as findings (those of ``DataqAuditFoundFiles``)."""
ERROR_SHOWN = 160
"""Characters of a destination's last error a condition quotes (the queue page and ``--events`` have it whole)."""
MINUTE = 60.0
HOUR = 3600.0
"""The span of a growth (the rule's slope is over an hour), and the most the rates ring keeps."""
GROWTH_SPAN = 1800.0
"""Seconds of the ring a growth needs at least (the rule's slope is over an hour; half of one is enough to tell)."""


class Severity(enum.StrEnum):
    """How soon someone should look, as the alert rules' ``severity`` label says (and the page's colour)."""

    PAGE = "page"
    """Data is late or about to be: red."""
    TICKET = "ticket"
    """Nothing is late yet, or an operator's decision is waited for: amber."""
    INFO = "info"
    """The operator's own decision (paused, a window shut): blue, no alert."""
    OK = "ok"
    """Healthy: green."""


class Condition(enum.StrEnum):
    """What may be wrong with a queue, worst first (the order a queue's state is picked in)."""

    REDIS_DOWN = "redis_down"
    DESTINATION_UNREACHABLE = "destination_unreachable"
    STALLED = "stalled"
    BACKLOG_OLD = "backlog_old"
    BACKLOG_GROWING = "backlog_growing"
    INACTIVE_RECORDS = "inactive_records"
    RECEIPTS_OVERDUE = "receipts_overdue"
    REPLICATION_DEGRADED = "replication_degraded"
    AUDIT_FOUND_FILES = "audit_found_files"
    PAUSED = "paused"
    OUTSIDE_WINDOW = "outside_window"
    HEALTHY = "healthy"

    @property
    def severity(self) -> Severity:
        return _SEVERITY[self]

    @property
    def alert(self) -> str | None:
        """The alert rule that fires on this condition (None: no rule, the operator's own decision)."""
        return _ALERT.get(self)

    @property
    def words(self) -> str:
        return self.value.replace("_", " ")


_SEVERITY = {
    Condition.REDIS_DOWN: Severity.PAGE, Condition.DESTINATION_UNREACHABLE: Severity.PAGE,
    Condition.STALLED: Severity.PAGE, Condition.BACKLOG_OLD: Severity.PAGE,
    Condition.BACKLOG_GROWING: Severity.TICKET, Condition.INACTIVE_RECORDS: Severity.TICKET,
    Condition.RECEIPTS_OVERDUE: Severity.TICKET, Condition.REPLICATION_DEGRADED: Severity.TICKET,
    Condition.AUDIT_FOUND_FILES: Severity.TICKET, Condition.PAUSED: Severity.INFO,
    Condition.OUTSIDE_WINDOW: Severity.INFO, Condition.HEALTHY: Severity.OK,
}
_ALERT = {
    Condition.REDIS_DOWN: "DataqRedisDown", Condition.DESTINATION_UNREACHABLE: "DataqDestinationUnreachable",
    Condition.STALLED: "DataqQueueStalled", Condition.BACKLOG_OLD: "DataqBacklogOld",
    Condition.BACKLOG_GROWING: "DataqQueueGrowing", Condition.INACTIVE_RECORDS: "DataqInactiveRecords",
    Condition.RECEIPTS_OVERDUE: "DataqReceiptsOverdue", Condition.REPLICATION_DEGRADED: "DataqReplicationDegraded",
    Condition.AUDIT_FOUND_FILES: "DataqAuditFoundFiles",
}


@dataclass(frozen=True, slots=True)
class Found:
    """One condition a queue is in, and what tells it."""

    condition: Condition
    detail: str
    since: float | None = None
    """When it began (unix time), where that is known."""

    def doc(self) -> dict[str, Any]:
        return {"condition": self.condition.value, "words": self.condition.words,
                "severity": self.condition.severity.value, "alert": self.condition.alert, "detail": self.detail,
                "since": self.since}


@dataclass(frozen=True, slots=True)
class Vitals:
    """What the conditions are read from: the inputs of the alert rules' metrics, at ``now``."""

    now: float
    active: int
    inactive: int
    action: bool
    """The action flag (off: paused)."""
    oldest_active: float | None
    """When the next record to run was pushed (``dataq_queue_oldest_age_seconds{list="active"}``); None: empty."""
    done_recently: int
    """Records done within ``stalled_after`` (from the rates ring)."""
    recent_span: float
    """Seconds of ``stalled_after`` the ring really counted."""
    pushed_hour: int
    done_hour: int
    hour_span: float
    """Seconds of the last hour the ring counted (records pushed and done within them)."""
    unreachable: Sequence[Unreachable] = ()
    outside: Sequence[OutsideWindow] = ()
    custody_since: float | None = None
    """When the oldest record in custody was handed on (None: none is)."""
    replication_problems: Sequence[str] = ()
    audits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    done_bytes_per_second: float = 0.0
    """The bytes of the records done over the last minute, per second (shown beside the conditions)."""

    @property
    def backlog_age(self) -> float | None:
        """Seconds the next record to run has waited (None: nothing is active)."""
        return None if self.oldest_active is None else round(max(0.0, self.now - self.oldest_active), 3)


def conditions_of(vitals: Vitals, thresholds: HealthSettings) -> list[Found]:
    """Every condition the queue is in, worst first; ``[healthy]`` when none."""
    v, t, found = vitals, thresholds, []
    for outage in v.unreachable:
        error = outage.error if len(outage.error) <= ERROR_SHOWN else outage.error[:ERROR_SHOWN - 1] + "…"
        found.append(Found(Condition.DESTINATION_UNREACHABLE, f"{outage.destination} unreachable: {error}",
                           outage.since))
    waited = v.backlog_age
    running = v.action and v.active > 0
    if (running and not v.unreachable and v.done_recently == 0 and waited is not None
            and waited >= t.stalled_after and v.recent_span >= t.stalled_after - 10):
        found.append(Found(Condition.STALLED, f"{v.active} active records and none done for "
                                              f"{duration(t.stalled_after)}: is a pop daemon working?"))
    if running and waited is not None and waited > t.backlog_old:
        found.append(Found(Condition.BACKLOG_OLD, f"the next record to run has waited {duration(waited)}",
                           v.oldest_active))
    if running and v.hour_span >= GROWTH_SPAN and v.active > t.growing_above:
        per_hour = (v.pushed_hour - v.done_hour) * 3600.0 / v.hour_span
        if per_hour > t.growing_per_hour:
            found.append(Found(Condition.BACKLOG_GROWING, f"the backlog grows by {per_hour:.0f} records an hour"))
    if v.inactive > 0:
        found.append(Found(Condition.INACTIVE_RECORDS, f"{v.inactive} inactive records wait for an operator"))
    if v.custody_since is not None and v.now - v.custody_since > t.receipts_overdue:
        found.append(Found(Condition.RECEIPTS_OVERDUE, "a record handed on has waited "
                                                       f"{duration(v.now - v.custody_since)} for its receipt",
                           v.custody_since))
    if v.replication_problems:
        found.append(Found(Condition.REPLICATION_DEGRADED, "; ".join(v.replication_problems)))
    for target, result in sorted(v.audits.items()):
        counts = result.get("counts") or {}
        bad = {name: int(counts.get(name, 0)) for name in BAD_AUDIT_CLASSES if counts.get(name)}
        if bad:
            listed = ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in bad.items())
            found.append(Found(Condition.AUDIT_FOUND_FILES, f"the last audit of {target} found {listed}"))
    if not v.action:
        found.append(Found(Condition.PAUSED, "the action flag is off: no record is claimed"))
    for shut in v.outside:
        found.append(Found(Condition.OUTSIDE_WINDOW, f"{shut.destination} is used only within {shut.windows}"))
    if not found:
        found.append(Found(Condition.HEALTHY, "nothing waits longer than it should"))
    order = list(Condition)
    return sorted(found, key=lambda item: order.index(item.condition))


INHERITED = (Condition.REDIS_DOWN, Condition.DESTINATION_UNREACHABLE, Condition.PAUSED, Condition.OUTSIDE_WINDOW)
"""A queue's conditions that hold for every activity of it: they are about its Redis, flags or destinations."""


def activity_condition(queue: Sequence[Found], now: float, active: int, done_per_minute: float,
                       oldest: float | None, thresholds: HealthSettings) -> Found:
    """An activity's state: the worst of its queue's conditions that hold for every record (Redis, the flags, the
    destinations) and its own: stalled when none of its queued records was done lately while its next record has
    waited ``stalled_after``, its backlog old past ``backlog_old`` (``oldest``: when its next record was pushed)."""
    found = [item for item in queue if item.condition in INHERITED]
    waited = None if oldest is None else max(0.0, now - oldest)
    paused = any(item.condition is Condition.PAUSED for item in found)
    if active > 0 and waited is not None and not paused:
        if done_per_minute <= 0 and waited >= thresholds.stalled_after:
            found.append(Found(Condition.STALLED, f"{active} records queued and none done lately"))
        if waited > thresholds.backlog_old:
            found.append(Found(Condition.BACKLOG_OLD, f"its next record has waited {duration(waited)}", oldest))
    if not found:
        return Found(Condition.HEALTHY, "its records are done at their share" if active else "nothing queued")
    order = list(Condition)
    return min(found, key=lambda item: order.index(item.condition))


def redis_down(error: str) -> list[Found]:
    """The conditions of a queue whose Redis does not answer (nothing else can be read)."""
    return [Found(Condition.REDIS_DOWN, error)]


async def read_vitals(store: QueueStore, summary: Summary, workers: Sequence[Worker],
                      thresholds: HealthSettings) -> Vitals:
    """The vitals of a queue, from the reads its gauges come from: each costs the same however long the lists."""
    ring = await store.rate_history(HOUR)
    now = ring.now
    recent, recent_span, _ = ring.totals(thresholds.stalled_after)
    hour, hour_span, _ = ring.totals(HOUR)
    minute, minute_span, _ = ring.totals(MINUTE)
    oldest = await store.oldest_pushed()
    problems: list[str] = []
    if store.replication.enabled:
        problems = replication_problems(await store.replication_status())
    return Vitals(
        now=now, active=summary.active, inactive=summary.inactive, action=summary.action,
        oldest_active=oldest.get("active"), done_recently=recent["done"], recent_span=recent_span,
        pushed_hour=hour["pushed"], done_hour=hour["done"], hour_span=hour_span,
        unreachable=unreachable_destinations(workers, summary.active + summary.delayed),
        outside=outside_windows(workers), custody_since=summary.custody_since, replication_problems=problems,
        audits=await store.audits(),
        done_bytes_per_second=minute["done_bytes"] / minute_span if minute_span > 0 else 0.0)


__all__ = ["Condition", "Found", "Severity", "Vitals", "activity_condition", "conditions_of", "read_vitals",
           "redis_down"]
