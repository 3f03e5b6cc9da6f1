"""What an audit finds: one :class:`Finding` per file that is not as it should be, the classes, and the forms they
are reported in (a table for people, JSON lines for scripts)."""

from __future__ import annotations

import enum
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


class FileClass(enum.StrEnum):
    """What an audit says of one file."""

    ARRIVED = "arrived"
    """Done at the last site, and its stored copy is named by that site's manifest and present with its size."""
    IN_FLIGHT = "in_flight"
    """Queued, delayed, running or in custody somewhere along the chain."""
    FAILED = "failed"
    """Inactive at some site, with its last error."""
    NEVER_FED = "never_fed"
    """No site knows it."""
    LOST = "lost"
    """Some site had it done or handed it on, but the end of the chain does not hold it."""
    UNKNOWN = "unknown"
    """Where it is could not be told: a site did not answer."""
    MISSING_COPY = "missing_copy"
    """A stored copy a manifest names is not there."""
    CORRUPT_COPY = "corrupt_copy"
    """A stored copy a manifest names has another size, or (``--deep``) other bytes."""
    DARK = "dark"
    """A file under a storing root that no manifest names (reported, never deleted)."""
    UNREADABLE = "unreadable"
    """A file the audit could not read."""


GOOD = frozenset({FileClass.ARRIVED})
"""The classes that are no finding."""
REPAIRABLE = frozenset({FileClass.MISSING_COPY, FileClass.CORRUPT_COPY, FileClass.NEVER_FED, FileClass.LOST})
"""The classes ``--repair`` puts right."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One file and what the audit says of it."""

    path: str
    record_id: str
    file_class: FileClass
    site: str
    """The site the class is about (where it is, failed, or was lost; this site for its own files)."""
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "id": self.record_id, "class": self.file_class.value, "site": self.site,
                "detail": self.detail}


FINDINGS_KEPT = 100
"""Findings of a target's last audit kept in Redis (a few KB), for the web console to list."""


@dataclass(frozen=True, slots=True)
class Report:
    """An audit's outcome: every file's class counted, and the findings (files not :data:`GOOD`)."""

    counts: dict[str, int]
    findings: list[Finding]

    @classmethod
    def of(cls, classified: Iterable[Finding], *, arrived: int = 0) -> Report:
        """The report of the files ``classified``, and of ``arrived`` more that arrived (counted, not listed: an
        audit of a healthy chain finds 100,000 of them)."""
        counts: Counter[str] = Counter()
        if arrived:
            counts[FileClass.ARRIVED.value] = arrived
        findings = []
        for finding in classified:
            counts[finding.file_class.value] += 1
            if finding.file_class not in GOOD:
                findings.append(finding)
        return cls(dict(sorted(counts.items())), findings)

    @property
    def files(self) -> int:
        return sum(self.counts.values())

    def repairable(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.file_class in REPAIRABLE]

    def kept(self) -> dict[str, object]:
        """What the last audit of a target keeps of its findings for the console: the first
        :data:`FINDINGS_KEPT`, and how many there were (``dataq audit`` lists them all)."""
        return {"findings": [finding.as_dict() for finding in self.findings[:FINDINGS_KEPT]],
                "findings_total": len(self.findings)}


def json_lines(report: Report) -> str:
    """One JSON object per finding, then ``{"summary": {CLASS: COUNT, ...}}``."""
    lines = [json.dumps(finding.as_dict(), ensure_ascii=False) for finding in report.findings]
    lines.append(json.dumps({"summary": report.counts}))
    return "\n".join(lines) + "\n"


def table(report: Report, title: str) -> str:
    """Counts per class, then the findings (path, id, class, site, detail), for people."""
    out = [title]
    width = max((len(name) for name in report.counts), default=5)
    out += [f"  {name:<{width}}  {count:>9,}" for name, count in report.counts.items()]
    out.append(f"  {'total':<{width}}  {report.files:>9,}")
    if report.findings:
        out.append("")
        out.append("findings (path, id, class, site, detail):")
        out += [f"  {f.path}  {f.record_id or '-'}  {f.file_class.value}  {f.site}" + (f"  {f.detail}" if f.detail
                                                                                       else "")
                for f in report.findings]
    return "\n".join(out) + "\n"
