"""The notice a scheduled audit sends (``dataq audit --scheduled``): what it found, what it repaired, and why it
could not look, mailed under the same rules as every notice (:mod:`dataq.ops.mail`)."""

from __future__ import annotations

from collections.abc import Sequence

from dataq.audit.findings import FileClass, Finding
from dataq.ops.notices import KIND_AUDIT, Notice

FINDINGS_LISTED = 50
"""Findings a notice lists one by one (``dataq audit`` on the host lists them all)."""
ACTIONABLE = frozenset({FileClass.LOST, FileClass.FAILED, FileClass.NEVER_FED, FileClass.MISSING_COPY,
                        FileClass.CORRUPT_COPY, FileClass.UNREADABLE})
"""What a notice is sent for: the classes the alert rule counts. Files in flight, dark or unknown (a site did not
answer) are reported by the audit, not mailed: a busy site has some every morning."""


def audit_notice(site: str, counts: dict[str, int], findings: Sequence[Finding], repaired: Sequence[Finding],
                 refused: Sequence[str], command: str) -> Notice | None:
    """The notice of one scheduled audit; None when it found nothing to act on and ran in full."""
    actionable = [finding for finding in findings if finding.file_class in ACTIONABLE]
    if not actionable and not refused:
        return None
    findings = actionable
    by_class = ", ".join(f"{name} {count:,}" for name, count in counts.items() if name in ACTIONABLE) or "nothing"
    subject = (f"dataq audit at {site}: {len(findings):,} file(s) found ({by_class})" if findings
               else f"dataq audit at {site} could not run in full")
    details: dict[str, object] = {"site": site, "counts": counts}
    if refused:
        details["refused"] = list(refused)
    details["findings"] = [finding.as_dict() for finding in findings[:FINDINGS_LISTED]]
    if len(findings) > FINDINGS_LISTED:
        details["not listed"] = f"{len(findings) - FINDINGS_LISTED:,} more: run `{command}` on {site}"
    if repaired:
        details["repaired"] = len(repaired)
    details["see them all with"] = command
    return Notice(KIND_AUDIT, subject, details)
