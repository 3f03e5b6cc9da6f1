"""What every dataq endpoint exports about its own process, from prometheus-client's standard collectors: memory,
CPU, open files and start time (``process_*``, read from ``/proc``), the Python build (``python_info``) and the
garbage collector (``python_gc_*``). The names are prometheus-client's, which dashboards and node-level alerts
already know; each endpoint has a registry of its own, so one process may serve several endpoints."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

PROCESS_METRICS = (
    "process_cpu_seconds_total",
    "process_max_fds",
    "process_open_fds",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_virtual_memory_bytes",
    "python_gc_collections_total",
    "python_gc_objects_collected_total",
    "python_gc_objects_uncollectable_total",
    "python_info",
)
"""The families the collectors below export (their counters with ``_total``, as a scrape shows them)."""


def add_process_collectors(registry: CollectorRegistry) -> CollectorRegistry:
    """Register the process, platform and garbage-collector collectors in ``registry``; returns it."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
