"""Prometheus metrics of a daemon: dataq's metric names, a small registry, and the ``GET /metrics`` endpoint.

::

    metrics = DaemonMetrics(queue, "pop")
    metrics.watch(store)                      # queue gauges refreshed from store.summary() at each scrape
    server = MetricsServer(metrics.registry, settings.metrics.host, settings.metrics.port_for("pop"))
    port = await server.start()
    ...
    metrics.done()
    ...
    await server.close()
"""

from __future__ import annotations

from dataq.metrics.daemon import (
    ACTION_DURATION,
    CLAIM_LATENCY,
    DEACTIVATED,
    DONE,
    DUPLICATES,
    FAILED,
    FLAG,
    INPUT_ERRORS,
    PUSHED,
    QUEUE_EVENTS,
    QUEUE_LENGTH,
    REDIS_RECONNECTS,
    REDIS_UP,
    WORKERS,
    DaemonMetrics,
    SummarySource,
)
from dataq.metrics.registry import CONTENT_TYPE, Counter, Gauge, Histogram, Registry
from dataq.metrics.server import MetricsServer

__all__ = [
    "ACTION_DURATION",
    "CLAIM_LATENCY",
    "CONTENT_TYPE",
    "DEACTIVATED",
    "DONE",
    "DUPLICATES",
    "FAILED",
    "FLAG",
    "INPUT_ERRORS",
    "PUSHED",
    "QUEUE_EVENTS",
    "QUEUE_LENGTH",
    "REDIS_RECONNECTS",
    "REDIS_UP",
    "WORKERS",
    "Counter",
    "DaemonMetrics",
    "Gauge",
    "Histogram",
    "MetricsServer",
    "Registry",
    "SummarySource",
]
