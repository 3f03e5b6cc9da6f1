"""The metrics of a queue's custody (:mod:`dataq.store.custody`), read from the queue's state in Redis like the
other queue gauges: records in custody per next site, the age of the oldest, records resent, and the end-to-end
latency of receipts as a histogram (its buckets are counters the receipts script keeps in Redis)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from dataq.store import Summary
from dataq.store.custody import RECEIPT_BUCKETS, receipt_bucket

CUSTODY_RECORDS = "dataq_custody_records"
CUSTODY_OLDEST = "dataq_custody_oldest_age_seconds"
RESENT = "dataq_custody_resent_total"
RECEIPT_LATENCY = "dataq_receipt_latency_seconds"
RECEIPT_COUNTERS = ("receipts", "receipt_ms_sum")
"""Counters of the queue that feed the histogram, not ``dataq_queue_events_total``."""


def is_receipt_counter(name: str) -> bool:
    return name in RECEIPT_COUNTERS or name.startswith("receipt_le:")


def custody_families(queue: str, summary: Summary, now: float | None = None) -> Iterator[Metric]:
    now = time.time() if now is None else now
    records = GaugeMetricFamily(CUSTODY_RECORDS, "Records handed on to a next site and not confirmed by the end of "
                                "the chain yet, per next site (\"\": in the hand-on spool).",
                                labels=["queue", "next_site"])
    records.add_metric([queue, ""], summary.custody_sites.get("", 0))
    for site, count in sorted(summary.custody_sites.items()):
        if site:
            records.add_metric([queue, site], count)
    yield records
    oldest = GaugeMetricFamily(CUSTODY_OLDEST, "Seconds the oldest record in custody has waited for its receipt "
                               "(0: custody is empty).", labels=["queue"])
    oldest.add_metric([queue], 0.0 if summary.custody_since is None else max(0.0, now - summary.custody_since))
    yield oldest
    counters = summary.counters
    resent = CounterMetricFamily(RESENT, "Records sent again because the next site did not know them "
                                 "(resend_after).", labels=["queue"])
    resent.add_metric([queue], counters.get("resent", 0))
    yield resent
    latency = HistogramMetricFamily(RECEIPT_LATENCY, "Seconds from a record's push here to its arrival at the end "
                                    "of the chain, as its receipt says.", labels=["queue"])
    running, buckets = 0.0, []
    for bound in (*RECEIPT_BUCKETS, float("inf")):
        running += counters.get(receipt_bucket(bound), 0)
        buckets.append((floatToGoString(bound), running))  # type: ignore[no-untyped-call]
    latency.add_metric([queue], buckets, counters.get("receipt_ms_sum", 0) / 1000)
    yield latency
