"""When a queue's backlog will be done at the rate of the last minutes, or why that cannot be said
(``dataq-cli --summary``, the metric ``dataq_queue_eta_seconds``).

The backlog is every record not done yet that will run without an operator: active, delayed and in flight
(inactive records wait for one). The rate is the queue's done records per minute over the last
:data:`ETA_WINDOW` seconds of its rates ring, all daemons together, counted from when records were first done in
them. The time is unknown, with the reason, while the
queue's actions are off, a destination is outside its windows or unreachable, no pop daemon is alive, or nothing
was done in the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dataq.ops.documents import duration, when
from dataq.ops.health import Rates
from dataq.ops.holds import Hold, what_holds
from dataq.store import QueueStore, Summary, Worker

ETA_WINDOW = 300.0
"""Seconds of the rate the time is reckoned at: long enough to ride out one slow batch, short enough to follow a
change of pace."""


NO_RATE = "no_rate"
"""Why the time cannot be said when nothing holds the queue back: nothing was done in the window."""


@dataclass(frozen=True, slots=True)
class Eta:
    """When the backlog will be done: ``seconds`` from now (0: nothing waits), or None with why."""

    backlog: int
    done_per_minute: float
    window: float
    seconds: float | None
    unknown: str | None = None
    """Why the time cannot be said: a :class:`~dataq.ops.holds.Hold`'s value, or :data:`NO_RATE`."""
    why: str = ""

    def doc(self) -> dict[str, Any]:
        return {"seconds": None if self.seconds is None else round(self.seconds, 1), "backlog": self.backlog,
                "done_per_minute": round(self.done_per_minute, 3), "window_seconds": self.window,
                "unknown": self.unknown, "why": self.why or None}

    def describe(self) -> str:
        """One line for people."""
        if self.seconds is None:
            return f"unknown: {self.why}"
        if not self.backlog:
            return "nothing waits"
        return (f"{duration(self.seconds)} ({self.backlog:,} records at {self.done_per_minute:,.1f} done per minute "
                f"over the last {self.window:.0f} s)")


def eta_of(summary: Summary, recent: Rates, workers: Sequence[Worker], backlog: int | None = None) -> Eta:
    """The time from the queue's counts, its done rate over the window and its daemons' heartbeats; with
    ``backlog``, of that many records (an activity's) at ``recent``'s rate (the activity's)."""
    if backlog is None:
        backlog = summary.active + summary.delayed + summary.in_flight
    done = recent.per_minute.get("done", 0.0)

    def unknown(code: str, why: str) -> Eta:
        return Eta(backlog, done, recent.window, None, code, why)

    if not backlog:
        return Eta(0, done, recent.window, 0.0)
    held = what_holds(summary.action, workers)
    if held is not None:
        more = held.fields
        return unknown(held.hold.value, {
            Hold.PAUSED: "paused: the queue's actions are off",
            Hold.NO_WORKER: "no pop daemon of the queue is running",
            Hold.OUTSIDE_WINDOW: f"destination {more.get('destination')} outside its windows "
                                 f"({more.get('windows')}) until {when(more.get('opens'))}",
            Hold.UNREACHABLE: f"destination {more.get('destination')} unreachable since {when(more.get('since'))}",
        }[held.hold])
    if done <= 0:
        return unknown(NO_RATE, f"no rate yet: nothing done in the last {recent.window:.0f} s")
    return Eta(backlog, done, recent.window, backlog / done * 60.0)


async def done_rate(store: QueueStore, activity: str | None = None) -> Rates:
    """The done rate the time is reckoned at: over the last :data:`ETA_WINDOW` seconds, from when records were
    first done in it (a backlog that came to an idle queue is not reckoned at the rate of the idle minutes)."""
    done, span = (await store.rate_history(ETA_WINDOW, activity)).since_busy("done", ETA_WINDOW)
    return Rates({"done": done * 60.0 / span if span > 0 else 0.0}, ETA_WINDOW, span, True)


async def queue_eta(store: QueueStore, summary: Summary, workers: Sequence[Worker]) -> Eta:
    """:func:`eta_of`, with the done rate read from the queue's rates ring."""
    return eta_of(summary, await done_rate(store), workers)


@dataclass(frozen=True, slots=True)
class ActivityEta:
    """One activity's backlog, its done records so far and when its backlog will be done."""

    activity: str
    active: int
    done: int
    eta: Eta

    def doc(self) -> dict[str, Any]:
        return {"active": self.active, "done": self.done, "eta_seconds": self.eta.doc()["seconds"],
                "eta": self.eta.doc()}


async def activity_etas(store: QueueStore, summary: Summary, workers: Sequence[Worker]) -> list[ActivityEta]:
    """Per activity, in the order served: its queued records (active: which activity a delayed or running record
    is in is not counted apart) at its own done rate over the window. Empty for a queue without activities."""
    found = []
    for activity, active in summary.activities.items():
        recent = await done_rate(store, activity)
        found.append(ActivityEta(activity, active, summary.counters.get(f"done@{activity}", 0),
                                 eta_of(summary, recent, workers, active)))
    return found

