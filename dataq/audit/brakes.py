"""The audit's safety brakes: when a repair would change too much, or the place audited does not look like itself,
nothing is changed and the audit says why (exit status 2).

As Rucio's auditor stops itself when more than a tenth of a storage looks wrong (``threshold = 0.1``): a mass of
"lost" files is far more often an unmounted disk, a wrong path or a site down than data lost, and a repair of them
all would resend a night's data for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dataq.audit.findings import Report
from dataq.config.audit_settings import DEFAULT_MAX_REPAIR, RepairLimit
from dataq.errors import DataqError

__all__ = ["DEFAULT_MAX_REPAIR", "Refused", "Repair", "RepairLimit", "check_repair", "check_root"]


class Refused(DataqError):
    """The audit refuses to run or to repair (exit status 2): the message says why and what to check; ``report``,
    what the audit found before it refused to repair (None: it found nothing, or did not look)."""

    def __init__(self, message: str, report: Report | None = None) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True, slots=True)
class Repair:
    """Whether an audit repairs what it finds (``--repair``), and within which brakes."""

    enabled: bool = False
    limit: RepairLimit = field(default_factory=lambda: RepairLimit.parse(DEFAULT_MAX_REPAIR))
    force: bool = False

    def check(self, repairs: int, audited: int) -> None:
        """Refused when ``repairs`` of ``audited`` files are more than the limit allows (unless forced)."""
        check_repair(repairs, audited, self.limit, self.force)


def check_repair(repairs: int, audited: int, limit: RepairLimit, force: bool) -> None:
    """Refused when ``repairs`` exceed what ``limit`` allows of ``audited`` files, unless ``force``."""
    allowed = limit.files(audited)
    if repairs > allowed and not force:
        raise Refused(f"the repair would touch {repairs:,} of {audited:,} files audited, more than --max-repair "
                      f"{limit} allows ({allowed:,}); nothing was changed. Check that every root is mounted and "
                      "every site up, then repair with --force, or raise --max-repair")


def check_root(root: str, exists: bool, named: int, holds_files: bool, named_before: int | None) -> None:
    """Refused, whatever ``--force`` says, when a storing root looks unmounted or replaced: missing, or holding no
    file while its manifests name ``named`` copies, or naming none where its last audit found ``named_before``."""
    if not exists:
        raise Refused(f"storing root {root} does not exist or is not a directory: is it mounted?")
    if named and not holds_files:
        raise Refused(f"storing root {root} holds no file, but its manifests name {named:,} copies: it looks "
                      "unmounted; nothing was changed")
    if not named and named_before:
        raise Refused(f"storing root {root} has no manifest, but its last audit found {named_before:,} copies named "
                      "there: it looks unmounted or replaced; nothing was changed")
