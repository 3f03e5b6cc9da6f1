"""``dataq audit``: run the audits the settings and switches ask for, print what they found, and say it in the
exit status (0 nothing found, 1 something found, 2 the audit could not run or refused to repair)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO

from dataq.audit.brakes import Refused
from dataq.audit.chain import ArrivedAsk, Ask
from dataq.audit.dir_audit import DirectoryAudit, audit_directories
from dataq.audit.findings import Finding, Report, json_lines, table
from dataq.audit.hashing import Hashing
from dataq.audit.root_audit import CopiesAudit, audit_root
from dataq.audit.sources import check_directories
from dataq.config import Settings
from dataq.feed.watch import WatchOptions
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
    skip: tuple[str, ...] = ()
    """Top folders of the root that hold no copies (an archive's catalog)."""


@dataclass(frozen=True, slots=True)
class Directories:
    """Directories of sources to audit, whose records go to ``queue``."""

    queue: str
    directories: list[WatchOptions]
    how: DirectoryAudit
    ask: Ask
    arrived: ArrivedAsk | None = None
    """How the end of the chain is asked which files it holds (None: with the full audit question)."""
    hashing: Hashing | None = None
    """The hashing of the directories' files, begun before the audit (None: the audit begins it)."""


@dataclass(slots=True)
class Outcome:
    """What the audits of one call found, repaired, could not ask, and refused."""

    findings: list[Finding] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    repaired: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        """The exit status: refused (2), something found (1), or nothing (0)."""
        if self.refused:
            return EXIT_REFUSED
        return EXIT_FOUND if self.findings else EXIT_CLEAN

    def refuse(self, refusal: Refused) -> None:
        """An audit that refused to run or to repair: why, and what it found before it refused."""
        self.refused.append(str(refusal))
        if refusal.report is not None:
            self.add(refusal.report, [])

    def add(self, report: Report, repaired: list[Finding]) -> None:
        self.findings += report.findings
        for name, count in report.counts.items():
            self.counts[name] = self.counts.get(name, 0) + count
        self.repaired += repaired


async def run_audits(settings: Settings, url: str, *, roots: list[StoringRoot], copies: CopiesAudit | None,
                     sources: Directories | None, as_json: bool, out: TextIO | None = None,
                     err: TextIO | None = None) -> Outcome:
    """Audit the storing ``roots`` (with ``copies``) and the ``sources``; print the findings of all, then what
    could not be asked and the refusals; what was found (its :attr:`~Outcome.status` is the exit status)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    outcome = Outcome()
    if sources is not None:
        # Before anything is read: a directory that is not there refuses the whole audit.
        check_directories(sources.directories)
        store = QueueStore.open(settings, url, sources.queue)
        try:
            result = await audit_directories(store, sources.directories, sources.ask, sources.how,
                                             arrived_ask=sources.arrived, hashing=sources.hashing)
            outcome.add(result.report, result.repaired)
            outcome.warnings += [f"{hop.site} cannot answer audit questions ({hop.reason}); its files are reported "
                                 "as far as the chain could tell" if hop.older else
                                 f"{hop.site} did not answer: {hop.reason}" for hop in result.silent]
        except Refused as exc:
            outcome.refuse(exc)
        finally:
            await store.close()
    for item in roots:
        if copies is None:
            break
        store = QueueStore.open(settings, url, item.queue)
        try:
            root_result = await audit_root(store, item.root, item.max_errors, copies, item.skip)
            outcome.add(root_result.report, root_result.repaired)
        except Refused as exc:
            outcome.refuse(exc)
        finally:
            await store.close()
    report = Report(dict(sorted(outcome.counts.items())), outcome.findings)
    if as_json:
        out.write(json_lines(report))
    else:
        out.write(table(report, _title(settings.site, roots if copies else [], sources)))
        out.writelines(f"repaired: {item.path}  {item.record_id}  {item.detail}\n" for item in outcome.repaired)
    err.writelines(f"Warning: {message}\n" for message in outcome.warnings)
    err.writelines(f"Error: {message}\n" for message in outcome.refused)
    return outcome


def _title(site: str, roots: list[StoringRoot], sources: Directories | None) -> str:
    audited = [options.root for options in sources.directories] if sources else []
    audited += [f"the copies under {item.root}" for item in roots]
    return f"audit of {', '.join(audited)} at {site or 'this site'}"
