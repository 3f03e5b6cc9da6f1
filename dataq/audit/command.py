"""``dataq audit``: run the audits the settings and switches ask for, print what they found, and say it in the
exit status (0 nothing found, 1 something found, 2 the audit could not run or refused to repair)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from dataq.audit.brakes import Refused
from dataq.audit.findings import Finding, Report, json_lines, table
from dataq.audit.root_audit import CopiesAudit, RootResult, audit_root
from dataq.config import Settings
from dataq.store import QueueStore

EXIT_CLEAN = 0
EXIT_FOUND = 1
EXIT_REFUSED = 2


@dataclass(frozen=True, slots=True)
class StoringRoot:
    """A root a queue's storing action keeps copies under."""

    queue: str
    max_errors: int
    """The queue's ``max_errors``: how its records' states are read."""
    root: str


async def audit_copies(settings: Settings, url: str, roots: list[StoringRoot], how: CopiesAudit, *, as_json: bool,
                       out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Audit each root; print the findings of all, then the refusals; the exit status."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    results: list[RootResult] = []
    refused: list[str] = []
    for item in roots:
        store = QueueStore.open(settings, url, item.queue)
        try:
            results.append(await audit_root(store, item.root, item.max_errors, how))
        except Refused as exc:
            refused.append(str(exc))
        finally:
            await store.close()
    report = _merged(results)
    if as_json:
        out.write(json_lines(report))
    else:
        out.write(table(report, f"audit of the copies under {', '.join(item.root for item in roots)} at "
                                f"{how.site or 'this site'}" + (" (deep)" if how.deep else "")))
        for result in results:
            for repaired in result.repaired:
                out.write(f"repaired: {repaired.path}  {repaired.record_id}  {repaired.detail}\n")
    for message in refused:
        err.write(f"Error: {message}\n")
    if refused:
        return EXIT_REFUSED
    return EXIT_FOUND if report.findings else EXIT_CLEAN


def _merged(results: list[RootResult]) -> Report:
    findings: list[Finding] = []
    counts: dict[str, int] = {}
    for result in results:
        findings += result.report.findings
        for name, count in result.report.counts.items():
            counts[name] = counts.get(name, 0) + count
    return Report(dict(sorted(counts.items())), findings)
