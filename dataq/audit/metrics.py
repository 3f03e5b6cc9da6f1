"""The metrics of a queue's audits, read from the last audit of each directory and storing root kept in the
queue's Redis (:meth:`~dataq.store.QueueStore.audits`), like the other queue gauges: the files of each class the
last audit found, and when it ran. The pop daemon exports them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from dataq.audit.findings import FileClass

AUDIT_FILES = "dataq_audit_files"
AUDIT_LAST_RUN = "dataq_audit_last_run_timestamp_seconds"
AUDIT_METRICS = (AUDIT_FILES, AUDIT_LAST_RUN)


def audit_families(queue: str, audits: Mapping[str, Mapping[str, Any]]) -> Iterator[Metric]:
    """Per audited target (``dir:PATH`` or ``copies:ROOT``): the files of every class its last audit found (0 for
    a class it found none of, so that an alert sees a count fall back), and when that audit started."""
    files = GaugeMetricFamily(AUDIT_FILES, "Files of each class the last audit of a directory or storing root "
                              "found (arrived, in_flight, failed, never_fed, lost, unknown, unreadable, "
                              "missing_copy, corrupt_copy, dark).", labels=["queue", "target", "class"])
    last = GaugeMetricFamily(AUDIT_LAST_RUN, "When the last audit of a directory or storing root started (unix "
                             "time).", labels=["queue", "target"])
    for target, result in sorted(audits.items()):
        counts = result.get("counts") or {}
        for file_class in FileClass:
            files.add_metric([queue, target, file_class.value], float(counts.get(file_class.value, 0)))
        if isinstance(result.get("at"), (int, float)):
            last.add_metric([queue, target], float(result["at"]))
    yield files
    yield last
