"""The text ``dataq-cli`` prints for custody: ``--trace``'s journey and the custody lines of ``--summary``."""

from __future__ import annotations

import time

from dataq.custody.journey import Hop, latencies
from dataq.custody.report import CustodyReport
from dataq.ops.documents import when


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s" if value < 120 else f"{value / 60:.1f} min"


def trace_lines(record_id: str, hops: list[Hop]) -> list[str]:
    """One block per site, in the order the record went, with the hop latencies and the end-to-end time."""
    lines = [f"Journey of {record_id} across {len(hops)} site(s)"]
    for number, (hop, latency) in enumerate(zip(hops, latencies(hops), strict=True), start=1):
        where = "this site" if hop.address is None else hop.address
        lines.append(f"  {number}. {hop.site} ({where}): {hop.state}" + (f": {hop.detail}" if hop.detail else ""))
        for label, value in (("pushed", hop.pushed), ("done", hop.done), ("handed on", hop.handed),
                             ("receipt", hop.confirmed)):
            if value is not None:
                lines.append(f"       {label + ':':<11}{when(value)}")
        if latency is not None:
            lines.append(f"       {'hop:':<11}{_seconds(latency)} from the push at the site before")
    first, last = hops[0], hops[-1]
    if first.pushed is not None and last.state == "done" and last.done is not None:
        lines.append(f"  end to end: {_seconds(last.done - first.pushed)} from the push here to done at {last.site}")
    return lines


def custody_lines(report: CustodyReport, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    oldest = ("" if report.oldest_since is None else
              f"; oldest {_seconds(now - report.oldest_since)} ({report.oldest_id}: {report.oldest_answer or 'asked'})")
    lines = [f"  custody:   {report.records} records handed on, waiting for their receipt{oldest}"]
    lines += [f"    next site {site or '(hand-on spool)'}: {count}" for site, count in sorted(report.sites.items())]
    lines.append(f"  receipts:  {report.receipts} in the last hour, end to end p50 {_seconds(report.p50)}, "
                 f"p99 {_seconds(report.p99)}; {report.resent} records resent")
    lines += [f"  warning:   next site {site}: {problem}" for site, problem in sorted(report.peers.items())]
    return lines
