"""The metrics dataq exports, declared in one place, and what the daemons call to update them.

A daemon makes one :class:`DaemonMetrics`, calls its methods where things happen (``pushed``, ``done``,
``action_duration``...) and serves ``metrics.registry`` with a :class:`~dataq.metrics.server.MetricsServer`.
The queue gauges (lengths, flags, workers, the queue's totals kept in Redis) are read from ``store.summary()``
at each scrape (:meth:`DaemonMetrics.watch`), so they are never staler than the scrape itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Protocol

from dataq.errors import StoreUnavailable
from dataq.logs import get_logger
from dataq.metrics.registry import HistogramChild, Registry
from dataq.store.types import Flag, Summary

WAIT_BUCKETS = (0.01, 0.1, 1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)
"""Time in the queue: from an idle queue (at once) to a backlog of a day."""

PUSHED = "dataq_records_pushed_total"
DUPLICATES = "dataq_duplicates_total"
INPUT_ERRORS = "dataq_input_errors_total"
DONE = "dataq_records_done_total"
FAILED = "dataq_records_failed_total"
DEACTIVATED = "dataq_records_deactivated_total"
ACTION_DURATION = "dataq_action_duration_seconds"
CLAIM_LATENCY = "dataq_claim_latency_seconds"
REDIS_RECONNECTS = "dataq_redis_reconnects_total"
REDIS_UP = "dataq_redis_up"
QUEUE_LENGTH = "dataq_queue_length"
FLAG = "dataq_flag"
WORKERS = "dataq_workers"
QUEUE_EVENTS = "dataq_queue_events_total"

log = get_logger()

ROLES = ("push", "pop")
QUEUE_LISTS = ("active", "inactive", "delayed", "in_flight", "tracked")


class SummarySource(Protocol):
    """What the queue gauges are read from: a :class:`dataq.store.QueueStore`."""

    def summary(self) -> Awaitable[Summary]: ...


class DaemonMetrics:
    """The metrics one daemon (``role`` ``push`` or ``pop``) exports for its queue.

    Counters count what this process did since it started (Prometheus sums them over daemons and handles
    restarts); the queue gauges and ``dataq_queue_events_total`` are the queue's state and totals in Redis.
    """

    def __init__(self, queue: str, role: str, registry: Registry | None = None) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self.queue, self.role = queue, role
        self.registry = r = Registry() if registry is None else registry
        q = ("queue",)
        self._pushed = r.counter(PUSHED, "Records stored and queued by this push daemon.", q)
        self._duplicates = r.counter(DUPLICATES, "Records ignored because their id was already tracked.", q)
        self._input_errors = r.counter(INPUT_ERRORS, "Record lines refused as malformed.", q)
        self._done = r.counter(DONE, "Records whose actions all succeeded.", q)
        self._failed = r.counter(FAILED, "Action failures (retried, delayed or deactivated).", q)
        self._deactivated = r.counter(DEACTIVATED, "Records moved to the inactive queue (failures or crashes).", q)
        self._action_duration = r.histogram(ACTION_DURATION, "Seconds one action took on one record.",
                                            ("queue", "action"))
        self._claim_latency = r.histogram(CLAIM_LATENCY, "Seconds from a record's push to its claim by a worker.",
                                          q, WAIT_BUCKETS)
        self._reconnects = r.counter(REDIS_RECONNECTS, "Times Redis came back after being unreachable.", q)
        self._redis_up = r.gauge(REDIS_UP, "1 if the last read of the queue state from Redis succeeded.", q)
        self._lengths = r.gauge(QUEUE_LENGTH, "Records in each list of the queue.", ("queue", "list"))
        self._flags = r.gauge(FLAG, "1 if the queue's flag (read, action) is on.", ("queue", "flag"))
        self._workers = r.gauge(WORKERS, "Daemons registered on the queue.", q)
        self._events = r.counter(QUEUE_EVENTS, "The queue's totals kept in Redis (all daemons, all time).",
                                 ("queue", "event"))
        # Series start at 0 so that rate() sees the first increment; only this role's, since a push daemon
        # exporting records_done 0 forever would mislead a dashboard that sums over daemons.
        own = (self._pushed, self._duplicates, self._input_errors) if role == "push" else (
            self._done, self._failed, self._deactivated, self._claim_latency)
        for metric in (*own, self._reconnects):
            metric.labels(queue=queue)
        # Observed once per record: the labelled series are looked up once, not per observation.
        self._claim_latency_series = self._claim_latency.labels(queue=queue)
        self._action_duration_series: dict[str, HistogramChild] = {}

    # push daemon
    def pushed(self, n: int = 1) -> None:
        self._pushed.labels(queue=self.queue).inc(n)

    def duplicate(self, n: int = 1) -> None:
        self._duplicates.labels(queue=self.queue).inc(n)

    def input_error(self, n: int = 1) -> None:
        self._input_errors.labels(queue=self.queue).inc(n)

    # pop daemon
    def done(self, n: int = 1) -> None:
        self._done.labels(queue=self.queue).inc(n)

    def failed(self, n: int = 1) -> None:
        """Count action failures, including those that deactivate a record (call :meth:`deactivated` too)."""
        self._failed.labels(queue=self.queue).inc(n)

    def deactivated(self, n: int = 1) -> None:
        self._deactivated.labels(queue=self.queue).inc(n)

    def action_duration(self, action: str, seconds: float) -> None:
        series = self._action_duration_series.get(action)
        if series is None:
            series = self._action_duration_series[action] = self._action_duration.labels(queue=self.queue,
                                                                                          action=action)
        series.observe(seconds)

    def claim_latency(self, seconds: float) -> None:
        """Observe the time a record waited: ``time.time() - record.pushed_at`` when it is claimed."""
        self._claim_latency_series.observe(max(0.0, seconds))

    def mirror_totals(self, totals: Mapping[str, int]) -> None:
        """Take this process's running totals (``pushed``, ``duplicate``, ``input_error``, ``done``, ``failed``,
        ``deactivated``) as the counters' values, for a daemon that keeps its own counts."""
        counters = {"pushed": self._pushed, "duplicate": self._duplicates, "input_error": self._input_errors,
                    "done": self._done, "failed": self._failed, "deactivated": self._deactivated}
        for name, total in totals.items():
            counters[name].labels(queue=self.queue).mirror(total)

    # both
    def redis_reconnect(self) -> None:
        self._reconnects.labels(queue=self.queue).inc()

    def set_flags(self, flags: Mapping[Flag, bool]) -> None:
        for flag, on in flags.items():
            self._flags.labels(queue=self.queue, flag=flag.value).set(1 if on else 0)

    def set_summary(self, summary: Summary) -> None:
        """Update the queue gauges from ``store.summary()``."""
        for name in QUEUE_LISTS:
            self._lengths.labels(queue=self.queue, list=name).set(getattr(summary, name))
        self.set_flags({Flag.READ: summary.read, Flag.ACTION: summary.action})
        self._workers.labels(queue=self.queue).set(summary.workers)
        for event, total in summary.counters.items():
            self._events.labels(queue=self.queue, event=event).mirror(total)

    async def refresh(self, store: SummarySource) -> None:
        """Read the queue gauges from ``store``; Redis being down shows as ``dataq_redis_up 0``, not an error."""
        try:
            summary = await store.summary()
        except StoreUnavailable as exc:
            self._redis_up.labels(queue=self.queue).set(0)
            log.debug("queue gauges not refreshed: redis unavailable", error=str(exc))
            return
        self._redis_up.labels(queue=self.queue).set(1)
        self.set_summary(summary)

    def watch(self, store: SummarySource) -> None:
        """Refresh the queue gauges from ``store`` at every scrape."""

        async def collect() -> None:
            await self.refresh(store)

        self.registry.add_collector(collect)
