"""The metrics of a queue's activities (:mod:`dataq.activities`): each one's backlog, its done records and when
its backlog will be done. Exported only by a queue with activities; a queue without has the queue's own."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dataq.ops.eta import ActivityEta

ACTIVITY_ACTIVE = "dataq_activity_active_records"
ACTIVITY_DONE = "dataq_activity_done_total"
ACTIVITY_ETA = "dataq_activity_eta_seconds"
ACTIVITY_METRICS = (ACTIVITY_ACTIVE, ACTIVITY_DONE, ACTIVITY_ETA)
DONE_PREFIX = "done@"
"""How the queue's counters name an activity's done records (``done@<activity>``): exported here, not among the
queue's events."""


def is_activity_counter(name: str) -> bool:
    return name.startswith(DONE_PREFIX)


def activity_families(queue: str, etas: Sequence[ActivityEta], fresh: bool) -> Iterator[Metric]:
    """``fresh``: Redis was read this time (an ETA from a stale read is left out, as the queue's is)."""
    if not etas:
        return
    active = GaugeMetricFamily(ACTIVITY_ACTIVE, "Records queued in each activity of the queue (waiting to run).",
                               labels=["queue", "activity"])
    done = CounterMetricFamily(ACTIVITY_DONE, "Records of each activity done (all daemons, all time).",
                               labels=["queue", "activity"])
    eta = GaugeMetricFamily(ACTIVITY_ETA, "Seconds until an activity's queued records are done at its done rate "
                            "of the last five minutes; absent while unknown.", labels=["queue", "activity"])
    for item in etas:
        active.add_metric([queue, item.activity], item.active)
        done.add_metric([queue, item.activity], item.done)
        if fresh and item.eta.seconds is not None:
            eta.add_metric([queue, item.activity], item.eta.seconds)
    yield active
    yield done
    yield eta
