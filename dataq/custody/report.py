"""What an operator is shown of a queue's custody (``dataq-cli --summary``, its ``custody`` key, the web console
and the metrics): records handed on and not confirmed yet, per next site, the oldest, resends, the end-to-end
latency of the last hour's receipts, and next sites that cannot be asked."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from dataq.custody.desk import where_further_on
from dataq.store import QueueStore, Summary, Worker

CHAIN_SAMPLE = 100
"""Records in custody (the oldest) whose last answers tell where along the chain they wait: the web console reads
them at every refresh, so a sample (about 70 KB), not the whole custody."""
LATENCY_WINDOW = 3600.0
"""Seconds of receipts the latency percentiles cover."""
PEERS_KEY = "next_sites"
"""The heartbeat key under which a pop daemon reports next sites it cannot ask (see ``network_move``)."""


@dataclass(frozen=True, slots=True)
class CustodyReport:
    records: int = 0
    sites: dict[str, int] = field(default_factory=dict)
    """Records in custody per next site (``""``: still in the hand-on spool)."""
    oldest_since: float | None = None
    oldest_id: str | None = None
    oldest_answer: str | None = None
    resent: int = 0
    receipts: int = 0
    """Receipts of the last hour."""
    p50: float | None = None
    p99: float | None = None
    peers: dict[str, str] = field(default_factory=dict)
    """Next sites the live pop daemons cannot ask (down, or not speaking receipts), and why."""

    def as_dict(self, now: float) -> dict[str, object]:
        return {"records": self.records, "sites": self.sites, "oldest_id": self.oldest_id,
                "oldest_age_seconds": None if self.oldest_since is None else round(now - self.oldest_since, 3),
                "oldest_answer": self.oldest_answer, "resent": self.resent, "receipts_last_hour": self.receipts,
                "latency_p50_seconds": self.p50, "latency_p99_seconds": self.p99, "next_sites_not_answering":
                self.peers}


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile (None of nothing)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def peers_of(workers: Sequence[Worker]) -> dict[str, str]:
    """The next sites the live pop daemons report they cannot ask, and why."""
    found: dict[str, str] = {}
    for worker in workers:
        reported = (worker.heartbeat or {}).get(PEERS_KEY)
        if isinstance(reported, dict):
            found.update({str(site): str(problem) for site, problem in reported.items()})
    return found


async def custody_report(store: QueueStore, summary: Summary, workers: Sequence[Worker],
                         now: float | None = None) -> CustodyReport | None:
    """The queue's custody (None for a queue that never handed anything on)."""
    now = time.time() if now is None else now
    resent = summary.counters.get("resent", 0)
    if not summary.custody and not summary.counters.get("receipts", 0) and not resent:
        return None
    latencies = await store.receipt_latencies(now - LATENCY_WINDOW)
    oldest = await store.oldest_in_custody(1)
    first = oldest[0] if oldest else None
    return CustodyReport(summary.custody, summary.custody_sites, summary.custody_since,
                         first.record.id if first else None, first.last.describe() if first and first.last else None,
                         resent, len(latencies), percentile(latencies, 0.5), percentile(latencies, 0.99),
                         peers_of(workers))


@dataclass(frozen=True, slots=True)
class ChainHop:
    """Records waiting at one site of the chain, and how long the oldest of them has waited (its lag)."""

    site: str
    waiting: int
    lag: float | None

    def as_dict(self) -> dict[str, object]:
        return {"site": self.site, "waiting": self.waiting,
                "lag_seconds": None if self.lag is None else round(self.lag, 3)}


async def chain_of(store: QueueStore, site: str, summary: Summary, now: float | None = None) -> list[ChainHop]:
    """This site, then every site further on where records of its custody wait, as their last answers say (of
    the :data:`CHAIN_SAMPLE` oldest), in the order the oldest reached them."""
    now = time.time() if now is None else now
    hops = [ChainHop(site, summary.active + summary.in_flight + summary.delayed + summary.inactive, None)]
    found: dict[str, tuple[int, float]] = {}
    for entry in await store.oldest_in_custody(CHAIN_SAMPLE):
        where = where_further_on(entry) or entry.site or "(hand-on spool)"
        count, oldest = found.get(where, (0, entry.handed_at))
        found[where] = (count + 1, min(oldest, entry.handed_at))
    hops += [ChainHop(where, count, now - oldest) for where, (count, oldest) in found.items()]
    return hops

