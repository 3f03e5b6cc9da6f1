"""The ``[audit]`` section: the scheduled audit (``dataq-audit.timer``, made by the generator, runs ``dataq audit
--scheduled``), and the repair limit the audit's brakes take (``--max-repair``). :mod:`dataq.config.schema`
gathers it into :class:`~dataq.config.schema.Settings`."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from dataq.config.loader import Invalid, Section

DEFAULT_MAX_REPAIR = "10%"
MIN_REPAIR_LIMIT = 10
"""Files a repair may always touch, however few were audited."""
DEFAULT_WHEN = "*-*-* 05:30:00"
"""Every morning at 05:30 (local time), when the night's files have arrived."""
_LIMIT = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<percent>%?)")


@dataclass(frozen=True, slots=True)
class RepairLimit:
    """``--max-repair``: a share of the audited files (``10%``) or a number of files (``25``)."""

    value: float
    percent: bool

    @classmethod
    def parse(cls, text: str) -> RepairLimit:
        match = _LIMIT.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is neither a percentage (10%) nor a number of files (25)")
        value, percent = float(match["number"]), bool(match["percent"])
        if percent and value > 100:
            raise ValueError(f"{text!r} is more than 100%")
        if not percent and value != int(value):
            raise ValueError(f"{text!r}: a number of files is a whole number")
        return cls(value, percent)

    def files(self, audited: int) -> int:
        """Files a repair of ``audited`` may touch (a share of at least :data:`MIN_REPAIR_LIMIT` files)."""
        if not self.percent:
            return int(self.value)
        return max(MIN_REPAIR_LIMIT, math.floor(audited * self.value / 100))

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{int(self.value)} files"


@dataclass(frozen=True, slots=True)
class AuditSettings(Section):
    """The scheduled audit (``dataq audit --scheduled``): what it audits, when, and whether it repairs."""

    enabled: bool = True
    """Schedule the audit (the generator makes ``dataq.target`` want ``dataq-audit.timer``) when there is something
    to audit: directories, or copies a queue stores."""
    when: str = DEFAULT_WHEN
    """When it runs, as systemd's ``OnCalendar=`` takes it (``systemd.time(7)``): every morning by default."""
    directories: tuple[str, ...] = ()
    """Absolute paths of directories of sources audited across the chain (none: ``[feed] directories``)."""
    copies: bool = True
    """Audit the copies of every queue that stores them (``disk_store``)."""
    deep: bool = False
    """Read every stored copy back and check its checksum (``--deep``): reads the whole storage."""
    repair: bool = False
    """Repair what is found, within ``max_repair`` (``--repair``); off: report only."""
    max_repair: str = DEFAULT_MAX_REPAIR
    """The most a repair may touch: a share of the files audited (``10%``, at least 10 files) or a number of files."""

    def _check(self) -> None:
        object.__setattr__(self, "directories", tuple(os.path.normpath(d) for d in self.directories))
        for directory in self.directories:
            if not os.path.isabs(directory):
                raise Invalid("directories", f"key '{{key}}' must hold absolute paths, got {directory!r}")
        if not self.when.strip() or "\n" in self.when:
            raise Invalid("when", "key '{key}' must be a calendar event of systemd.time(7), such as "
                          f"{DEFAULT_WHEN!r} or 'daily'")
        try:
            RepairLimit.parse(self.max_repair)
        except ValueError as exc:
            raise Invalid("max_repair", f"key '{{key}}': {exc}") from None

    @property
    def limit(self) -> RepairLimit:
        return RepairLimit.parse(self.max_repair)
