"""When a queue's backlog will be done at the rate of the last minutes, or why that cannot be said
(``dataq-cli --summary``, the metric ``dataq_queue_eta_seconds``).

The backlog is every record not done yet that will run without an operator: active, delayed and in flight
(inactive records wait for one). The rate is the queue's done records per minute over the last
:data:`ETA_WINDOW` seconds of its rates ring, all daemons together. The time is unknown, with the reason, while the
queue's actions are off, a destination is outside its windows or unreachable, no pop daemon is alive, or nothing
was done in the window.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dataq.ops.documents import duration, when
from dataq.ops.health import Rates, Unreachable, live_pops, outside_windows, rates, unreachable_destinations
from dataq.store import QueueStore, Summary, Worker

ETA_WINDOW = 300.0
"""Seconds of the rate the time is reckoned at: long enough to ride out one slow batch, short enough to follow a
change of pace."""


class EtaUnknown(enum.StrEnum):
    """Why the time cannot be said."""

    PAUSED = "paused"
    UNREACHABLE = "unreachable"
    OUTSIDE_WINDOW = "outside_window"
    NO_WORKER = "no_worker"
    NO_RATE = "no_rate"


@dataclass(frozen=True, slots=True)
class Eta:
    """When the backlog will be done: ``seconds`` from now (0: nothing waits), or None with why."""

    backlog: int
    done_per_minute: float
    window: float
    seconds: float | None
    unknown: EtaUnknown | None = None
    why: str = ""

    def doc(self) -> dict[str, Any]:
        return {"seconds": None if self.seconds is None else round(self.seconds, 1), "backlog": self.backlog,
                "done_per_minute": round(self.done_per_minute, 3), "window_seconds": self.window,
                "unknown": None if self.unknown is None else self.unknown.value, "why": self.why or None}

    def describe(self) -> str:
        """One line for people."""
        if self.seconds is None:
            return f"unknown: {self.why}"
        if not self.backlog:
            return "nothing waits"
        return (f"{duration(self.seconds)} ({self.backlog:,} records at {self.done_per_minute:,.1f} done per minute "
                f"over the last {self.window:.0f} s)")


def eta_of(summary: Summary, recent: Rates, workers: Sequence[Worker]) -> Eta:
    """The time from the queue's counts, its done rate over the window and its daemons' heartbeats."""
    backlog = summary.active + summary.delayed + summary.in_flight
    done = recent.per_minute.get("done", 0.0)

    def unknown(code: EtaUnknown, why: str) -> Eta:
        return Eta(backlog, done, recent.window, None, code, why)

    if not backlog:
        return Eta(0, done, recent.window, 0.0)
    if not summary.action:
        return unknown(EtaUnknown.PAUSED, "paused: the queue's actions are off")
    pops = live_pops(workers)
    if not pops:
        return unknown(EtaUnknown.NO_WORKER, "no pop daemon of the queue is running")
    shut = outside_windows(pops)
    if shut:
        return unknown(EtaUnknown.OUTSIDE_WINDOW, f"destination {shut[0].destination} outside its windows "
                                                  f"({shut[0].windows}) until {when(shut[0].opens)}")
    outages: list[Unreachable] = unreachable_destinations(pops, summary)
    if outages:
        return unknown(EtaUnknown.UNREACHABLE, f"destination {outages[0].destination} unreachable since "
                                               f"{when(outages[0].since)}")
    if done <= 0:
        return unknown(EtaUnknown.NO_RATE, f"no rate yet: nothing done in the last {recent.window:.0f} s")
    return Eta(backlog, done, recent.window, backlog / done * 60.0)


async def queue_eta(store: QueueStore, summary: Summary, workers: Sequence[Worker]) -> Eta:
    """:func:`eta_of`, with the done rate read from the queue's rates ring."""
    return eta_of(summary, await rates(store, ETA_WINDOW), workers)

