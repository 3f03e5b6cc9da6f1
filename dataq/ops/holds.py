"""What holds a whole queue's records back now, if anything: the one decision ``dataq-cli --why`` (for a queued
record) and the ETA (for the backlog) both start from, so that they never disagree.

In this order, the first that holds: the queue's actions are off (``paused``), no pop daemon of the queue is alive
(``no_worker``), a destination is outside its windows (``outside_window``), a destination is unreachable
(``unreachable``), from the queue's flag and its pop daemons' heartbeats.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataq.ops.health import live_pops, outside_windows, unreachable_destinations
from dataq.store import Worker


class Hold(enum.StrEnum):
    PAUSED = "paused"
    NO_WORKER = "no_worker"
    OUTSIDE_WINDOW = "outside_window"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class Held:
    """Why the queue waits, and the fields that say more: ``destination`` with ``windows`` and ``opens`` (outside
    its windows), or with ``since``, ``error`` and ``next_probe`` (unreachable)."""

    hold: Hold
    fields: Mapping[str, Any] = field(default_factory=dict)


def what_holds(actions_on: bool, workers: Sequence[Worker]) -> Held | None:
    """What holds the queue back (None: nothing; its records run in their order)."""
    if not actions_on:
        return Held(Hold.PAUSED)
    pops = live_pops(workers)
    if not pops:
        return Held(Hold.NO_WORKER)
    shut = outside_windows(pops)
    if shut:
        window = shut[0]
        return Held(Hold.OUTSIDE_WINDOW, {"destination": window.destination, "windows": window.windows,
                                          "opens": window.opens})
    outages = unreachable_destinations(pops)
    if outages:
        outage = outages[0]
        return Held(Hold.UNREACHABLE, {"destination": outage.destination, "since": outage.since,
                                       "error": outage.error, "next_probe": _next_probe(pops, outage.destination)})
    return None


def _next_probe(workers: Sequence[Worker], destination: str) -> float | None:
    """When the first of the pop daemons that cannot reach ``destination`` probes it next (from their heartbeats)."""
    probes = []
    for worker in workers:
        beat = worker.heartbeat or {}
        outages, at = beat.get("unreachable"), beat.get("at")
        for outage in outages if isinstance(outages, list) else ():
            wait = outage.get("next_probe_in")
            if outage.get("destination") == destination and isinstance(wait, (int, float)) \
                    and isinstance(at, (int, float)):
                probes.append(float(at) + float(wait))
    return min(probes, default=None)
