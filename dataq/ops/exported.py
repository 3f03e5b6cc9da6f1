"""Every metric family a dataq endpoint exports: the push and pop daemons, the feeders and the web console.

Alert rules and dashboards may name only these (their tests check it), and a test of each endpoint checks that
it exports nothing else, so this list cannot drift from what a scrape really returns. Histograms are named by
family (``..._bucket``, ``_sum`` and ``_count`` are its series), counters with their ``_total``.
"""

from __future__ import annotations

from dataq.audit.metrics import AUDIT_METRICS
from dataq.custody.metrics import CUSTODY_OLDEST, CUSTODY_RECORDS, RECEIPT_LATENCY, RESENT
from dataq.feed.metrics import FEED_METRICS
from dataq.ops.metrics import DAEMON_METRICS
from dataq.ops.process_metrics import PROCESS_METRICS

EXPORTED_METRICS: frozenset[str] = frozenset({
    *DAEMON_METRICS, CUSTODY_RECORDS, CUSTODY_OLDEST, RESENT, RECEIPT_LATENCY, *AUDIT_METRICS, *FEED_METRICS,
    *PROCESS_METRICS,
})
