"""The Prometheus metrics of a push or pop daemon, exported with prometheus-client (served by :mod:`.exposition`).

Names, help texts and the text format are prometheus-client's. What dataq keeps itself, and why:

* Counters are the daemon's own running totals (the committer's, the outcome writer's), read at scrape time through
  one custom collector: the hot paths carry no metrics code at all.
* Histograms count into buckets here (:class:`Buckets`): one bisection on the event loop, 0.3 µs, where a
  prometheus-client ``Histogram.observe`` takes a lock per call (2–3 µs), which only threads need. At 25,000
  records a second and two observations per record, that lock would cost the pop daemon a tenth of its CPU.
* The queue's gauges (list lengths, flags, workers, the queue's totals kept in Redis) come from a cache that
  the daemon refreshes in the background (:meth:`DaemonMetrics.refresh`), so a scrape never waits on Redis.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from dataq.audit.metrics import audit_families
from dataq.custody.metrics import custody_families, is_receipt_counter
from dataq.errors import StoreUnavailable
from dataq.logs import get_logger
from dataq.ops.activity_metrics import ACTIVITY_METRICS, activity_families, is_activity_counter
from dataq.ops.eta import ActivityEta, Eta, activity_etas, queue_eta
from dataq.ops.exposition import FamiliesCollector, one_sample
from dataq.ops.health import Rates, rates
from dataq.ops.process_metrics import add_process_collectors
from dataq.store import QueueStore
from dataq.store.types import Summary

ACTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Action durations: from a checksum check (milliseconds) to a large transfer (up to the default timeout)."""
WAIT_BUCKETS = (0.01, 0.1, 1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)
"""Time in the queue: from an idle queue (at once) to a backlog of a day."""

PUSHED = "dataq_records_pushed_total"
DUPLICATES = "dataq_duplicates_total"
INPUT_ERRORS = "dataq_input_errors_total"
DONE = "dataq_records_done_total"
FAILED = "dataq_records_failed_total"
DEACTIVATED = "dataq_records_deactivated_total"
WAITED = "dataq_records_waited_total"
UNREACHABLE = "dataq_destination_unreachable"
ACTION_DURATION = "dataq_action_duration_seconds"
CLAIM_LATENCY = "dataq_claim_latency_seconds"
REDIS_RECONNECTS = "dataq_redis_reconnects_total"
REDIS_UP = "dataq_redis_up"
QUEUE_LENGTH = "dataq_queue_length"
FLAG = "dataq_flag"
WORKERS = "dataq_workers"
QUEUE_EVENTS = "dataq_queue_events_total"
QUEUE_RATE = "dataq_queue_rate_per_minute"
OLDEST_AGE = "dataq_queue_oldest_age_seconds"
ETA = "dataq_queue_eta_seconds"
ACTION_BYTES = "dataq_action_bytes_total"
REPLICAS = "dataq_replication_replicas"
REPLICATION_PROBLEMS = "dataq_replication_problems"
DAEMON_METRICS = (PUSHED, DUPLICATES, INPUT_ERRORS, DONE, FAILED, DEACTIVATED, WAITED, UNREACHABLE, ACTION_DURATION,
                  CLAIM_LATENCY, REDIS_RECONNECTS, REDIS_UP, QUEUE_LENGTH, FLAG, WORKERS, QUEUE_EVENTS, QUEUE_RATE,
                  OLDEST_AGE, ETA, ACTION_BYTES, REPLICAS, REPLICATION_PROBLEMS, *ACTIVITY_METRICS)
"""The families of the push and pop daemons' own (besides custody's and the process's)."""

ROLES = ("push", "pop")
QUEUE_LISTS = ("active", "inactive", "delayed", "in_flight", "tracked")
WAITING_LISTS = ("active", "delayed")
"""The lists whose oldest record's age is exported: the backlog, and the records waiting out a retry delay."""
TOTALS: Mapping[str, tuple[tuple[str, str, str], ...]] = {
    "push": ((PUSHED, "pushed", "Records stored and queued by this push daemon."),
             (DUPLICATES, "duplicate", "Records ignored because their id was already tracked."),
             (INPUT_ERRORS, "input_error", "Record lines refused as malformed.")),
    "pop": ((DONE, "done", "Records whose actions all succeeded."),
            (FAILED, "failed", "Action failures (retried, delayed or deactivated)."),
            (DEACTIVATED, "deactivated", "Records moved to the inactive queue (failures or crashes)."),
            (WAITED, "waited", "Records put back to wait for an unreachable destination (not counted as failures).")),
}
"""Per role: (metric, the daemon's total it reads, help) of the counters of what this process did."""

Totals = Callable[[], Mapping[str, int]]
"""The daemon's running totals, by the names of :data:`TOTALS`."""

log = get_logger()


class Buckets:
    """One histogram series: observations counted into ``le`` buckets, on the event loop only (no lock)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = (*bounds, math.inf)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # the first bound >= value: its ``le`` bucket
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count)`` pairs as Prometheus wants them; the ``+Inf`` one is the count, so they always agree
        (a scrape thread may read while the loop observes)."""
        running, pairs = 0, []
        for bound, count in zip(self.bounds, list(self.counts), strict=True):
            running += count
            pairs.append((floatToGoString(bound), float(running)))  # type: ignore[no-untyped-call]
        return pairs


class DaemonMetrics:
    """The metrics one daemon (``role`` ``push`` or ``pop``) exports for its queue.

    Counters count what this process did since it started (Prometheus sums them over daemons and handles
    restarts); the queue gauges and ``dataq_queue_events_total`` are the queue's state and totals in Redis.
    """

    def __init__(self, queue: str, role: str, totals: Totals) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self.queue, self.role, self.totals = queue, role, totals
        self.reconnects = 0
        self._claim_latency = Buckets(WAIT_BUCKETS)
        self._action_durations: dict[str, Buckets] = {}
        self._summary: Summary | None = None
        self._rates: Rates | None = None
        self._eta: Eta | None = None
        self._activities: list[ActivityEta] = []
        self._redis_up = False
        self._unreachable: dict[str, bool] = {}
        self._bytes: dict[tuple[str, str], int] = {}
        self._oldest: dict[str, float] = {}
        self._replication: tuple[int, int] | None = None
        self._audits: dict[str, dict[str, Any]] = {}
        self.registry = add_process_collectors(CollectorRegistry(auto_describe=False))
        self.registry.register(FamiliesCollector(self.families))

    # --- what the daemon tells ---------------------------------------------------------------------------

    def claim_latency(self, seconds: float) -> None:
        """Observe the time a record waited: ``time.time() - record.pushed_at`` when it is claimed."""
        self._claim_latency.observe(max(0.0, seconds))

    def action_duration(self, action: str, seconds: float) -> None:
        series = self._action_durations.get(action)
        if series is None:
            series = self._action_durations[action] = Buckets(ACTION_BUCKETS)
        series.observe(seconds)

    def action_bytes(self, action: str, destination: str, size: int) -> None:
        """Count the bytes of a record an action completed, by where it sent them."""
        key = (action, destination)
        self._bytes[key] = self._bytes.get(key, 0) + size

    def replication(self, replicas: int, problems: int) -> None:
        """The replicas connected to the master and the problems seen now (0: replication is healthy)."""
        self._replication = (replicas, problems)

    def redis_reconnect(self) -> None:
        self.reconnects += 1

    def destination_unreachable(self, destination: str, unreachable: bool) -> None:
        """Mark a destination of the queue's actions unreachable (1) or reachable again (0)."""
        self._unreachable[destination] = unreachable

    async def refresh(self, store: QueueStore) -> str | None:
        """Read the queue gauges into the cache; when Redis is unavailable, say why (``dataq_redis_up`` is then 0
        and the gauges keep their last values)."""
        try:
            summary = await store.summary()
            recent = await rates(store)
            oldest = await store.oldest_pushed()
            workers = await store.workers()
            self._eta = await queue_eta(store, summary, workers)
            self._activities = await activity_etas(store, summary, workers)
            if self.role == "pop":  # one daemon exports the audits, as it does what actions did
                self._audits = await store.audits()
        except StoreUnavailable as exc:
            self._redis_up = False
            log.debug("queue gauges not refreshed: redis unavailable", error=str(exc))
            return str(exc)
        self.set_summary(summary, recent, oldest)
        return None

    def set_summary(self, summary: Summary, recent: Rates | None = None,
                    oldest: Mapping[str, float] | None = None) -> None:
        """Cache the queue's state, its rates over the last minute and when the oldest record of each waiting list
        was pushed, as read from Redis (which is therefore up)."""
        self._summary, self._rates, self._redis_up = summary, recent, True
        self._oldest = dict(oldest or {})

    # --- what a scrape reads -----------------------------------------------------------------------------

    def families(self) -> Iterator[Metric]:
        q = self.queue
        totals = self.totals()
        for name, total, documentation in TOTALS[self.role]:
            yield one_sample(CounterMetricFamily(name, documentation, labels=["queue"]), [q], totals.get(total, 0))
        yield one_sample(CounterMetricFamily(REDIS_RECONNECTS, "Times Redis came back after being unreachable.",
                                       labels=["queue"]), [q], self.reconnects)
        if self.role == "pop":
            latency = HistogramMetricFamily(CLAIM_LATENCY, "Seconds from a record's push to its claim by a worker.",
                                            labels=["queue"])
            latency.add_metric([q], self._claim_latency.cumulative(), self._claim_latency.sum)
            yield latency
            durations = HistogramMetricFamily(ACTION_DURATION, "Seconds one action took on one record.",
                                              labels=["queue", "action"])
            for action, series in list(self._action_durations.items()):
                durations.add_metric([q, action], series.cumulative(), series.sum)
            yield durations
            unreachable = GaugeMetricFamily(UNREACHABLE, "1 while a destination of the queue's actions is "
                                            "unreachable (its records wait), 0 once it is back.",
                                            labels=["queue", "destination"])
            for destination, down in list(self._unreachable.items()):
                unreachable.add_metric([q, destination], 1 if down else 0)
            yield unreachable
            moved = CounterMetricFamily(ACTION_BYTES, "Bytes of the records each action completed, by destination "
                                        "(the action's name when it has none).",
                                        labels=["queue", "action", "destination"])
            for (action, destination), size in list(self._bytes.items()):
                moved.add_metric([q, action, destination], size)
            yield moved
            yield from audit_families(q, self._audits)
        yield one_sample(GaugeMetricFamily(REDIS_UP, "1 if the last read of the queue state from Redis succeeded.",
                                     labels=["queue"]), [q], 1 if self._redis_up else 0)
        summary = self._summary
        if summary is None:
            return
        lengths = GaugeMetricFamily(QUEUE_LENGTH, "Records in each list of the queue.", labels=["queue", "list"])
        for name in QUEUE_LISTS:
            lengths.add_metric([q, name], getattr(summary, name))
        yield lengths
        if self._redis_up:
            # Left out while Redis cannot be read: an age computed from a stale read would grow for ever.
            now = time.time()
            ages = GaugeMetricFamily(OLDEST_AGE, "Seconds since the push of the record next to run (active: the "
                                     "backlog's oldest) or next due (delayed: waiting out a retry delay); 0: empty.",
                                     labels=["queue", "list"])
            for name in WAITING_LISTS:
                pushed = self._oldest.get(name)
                ages.add_metric([q, name], 0.0 if pushed is None else max(0.0, now - pushed))
            yield ages
        if self._replication is not None:
            replicas, problems = self._replication
            yield one_sample(GaugeMetricFamily(REPLICAS, "Replicas connected to the queue's Redis master.",
                                         labels=["queue"]), [q], replicas)
            yield one_sample(GaugeMetricFamily(REPLICATION_PROBLEMS, "Problems of the master's replicas, sentinels or "
                                         "cluster seen now (0: replication is healthy).", labels=["queue"]),
                       [q], problems)
        flags = GaugeMetricFamily(FLAG, "1 if the queue's flag (read, action) is on.", labels=["queue", "flag"])
        flags.add_metric([q, "read"], 1 if summary.read else 0)
        flags.add_metric([q, "action"], 1 if summary.action else 0)
        yield flags
        yield one_sample(GaugeMetricFamily(WORKERS, "Daemons registered on the queue.", labels=["queue"]), [q],
                   summary.workers)
        events = CounterMetricFamily(QUEUE_EVENTS, "The queue's totals kept in Redis (all daemons, all time).",
                                     labels=["queue", "event"])
        for event, count in sorted(summary.counters.items()):
            if not is_receipt_counter(event) and not is_activity_counter(event):
                events.add_metric([q, event], count)
        yield events
        yield from custody_families(q, summary)
        yield from activity_families(q, self._activities, self._redis_up)
        if self._rates is not None:
            per_minute = GaugeMetricFamily(QUEUE_RATE, "Records per minute over the last minute (all daemons), "
                                           "from the queue's rates ring: kind pushed, done or failed.",
                                           labels=["queue", "kind"])
            for kind, value in self._rates.per_minute.items():
                per_minute.add_metric([q, kind], value)
            yield per_minute
        if self._redis_up and self._eta is not None and self._eta.seconds is not None:
            # Left out while unknown (paused, an outage, no pop daemon, no rate yet): --summary says why.
            yield one_sample(GaugeMetricFamily(ETA, "Seconds until the backlog (active, delayed, in flight) is done "
                                               "at the done rate of the last five minutes; absent while unknown.",
                                               labels=["queue"]), [q], self._eta.seconds)
