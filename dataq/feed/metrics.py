"""The Prometheus metrics of a watching feeder (``dataq feed --watch DIR``), served at ``GET /metrics``.

What an operator pages on for a feeder: records waiting in its spool and how old the oldest is (a link down, a
push daemon refusing), records refused and kept for an operator, which push daemon it is connected to, and when a
record was last acknowledged. The spool's counts are read at scrape time through a reader of their own, as
``dataq feed --status`` reads them (WAL readers never block the feeder); the link and the replies are the
forwarder's, read from memory. Every family is labelled with the watched directory, so the feeders of one host
can be told apart however they are scraped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from dataq.errors import SpoolError
from dataq.feed.spool_status import read_spool_status
from dataq.logs import get_logger
from dataq.ops.exposition import FamiliesCollector, one_sample
from dataq.ops.process_metrics import add_process_collectors

SPOOL_PENDING = "dataq_feed_spool_pending_records"
SPOOL_OLDEST = "dataq_feed_spool_oldest_pending_age_seconds"
SPOOL_REFUSED = "dataq_feed_spool_refused_records"
LINK_UP = "dataq_feed_link_up"
SENT = "dataq_feed_records_sent_total"
REFUSED = "dataq_feed_records_refused_total"
LAST_SUCCESS = "dataq_feed_last_success_timestamp_seconds"
FEED_METRICS = (SPOOL_PENDING, SPOOL_OLDEST, SPOOL_REFUSED, LINK_UP, SENT, REFUSED, LAST_SUCCESS)

log = get_logger()


class LinkView(Protocol):
    """What the metrics read of a forwarder (:class:`~dataq.feed.forward.Forwarder`)."""

    @property
    def connected_to(self) -> str | None:
        """``host:port`` of the push daemon connected to; None while none is reachable."""

    @property
    def last_answered_at(self) -> float | None:
        """Unix time of the last record a push daemon acknowledged (None: none yet)."""

    def replies(self) -> tuple[int, int]:
        """Records acknowledged (pushed or ignored) and refused since the start."""


class FeedMetrics:
    """The metrics of the feeder watching ``directory``, whose spool is ``spool_dir`` and whose push daemons are
    ``targets`` (``host:port``, in the order tried)."""

    def __init__(self, directory: str, spool_dir: str, targets: Sequence[str]) -> None:
        self.directory, self.spool_dir, self.targets = directory, spool_dir, tuple(targets)
        self.link: LinkView | None = None
        """The forwarder, once the feeder has started it."""
        self.registry = add_process_collectors(CollectorRegistry(auto_describe=False))
        self.registry.register(FamiliesCollector(self.families))

    def families(self, now: float | None = None) -> Iterator[Metric]:
        now = time.time() if now is None else now
        labels = [self.directory]

        def gauge(name: str, documentation: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, documentation, labels=["directory"])

        def counter(name: str, documentation: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, documentation, labels=["directory"])

        try:
            status = read_spool_status(self.spool_dir)
        except SpoolError as exc:  # a damaged or unreadable spool: the feeder itself reports it; the rest still shows
            log.debug("spool not read for the metrics", spool=self.spool_dir, error=str(exc))
        else:
            yield one_sample(gauge(SPOOL_PENDING, "Records in the spool not yet acknowledged by a push daemon."),
                             labels, status.pending)
            age = 0.0 if status.oldest_pending is None else max(0.0, now - status.oldest_pending)
            yield one_sample(gauge(SPOOL_OLDEST, "Seconds the oldest record waiting in the spool has waited (0: none "
                                   "waits)."), labels, age)
            yield one_sample(gauge(SPOOL_REFUSED, "Records a push daemon refused, kept in the spool for an operator "
                                   "(dataq feed --status lists them, --retry-refused sends them again)."),
                             labels, status.refused)
        link = self.link
        connected = link.connected_to if link is not None else None
        up = GaugeMetricFamily(LINK_UP, "1 for the push daemon the feeder is connected to, 0 for the others (all 0: "
                               "none is reachable).", labels=["directory", "target"])
        for target in self.targets:
            up.add_metric([self.directory, target], 1 if target == connected else 0)
        yield up
        sent, refused = link.replies() if link is not None else (0, 0)
        yield one_sample(counter(SENT, "Records a push daemon acknowledged (pushed or ignored as known)."), labels,
                         sent)
        yield one_sample(counter(REFUSED, "Records a push daemon refused (Error:)."), labels, refused)
        last = link.last_answered_at if link is not None else None
        yield one_sample(gauge(LAST_SUCCESS, "Unix time of the last record a push daemon acknowledged (0: none since "
                               "the start)."), labels, last or 0.0)
