"""The audit of directories at a site that holds sources (``dataq audit DIR...``): every file hashed, the chain asked
afresh about each (:mod:`.chain`), each file classified (:mod:`.classify`) and, with ``repair``, put right within
the brakes: a file no site knows is fed, a file lost along the chain is sent again, marked *again*, so that every
site takes it though it remembers it done."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace

from dataq.audit.brakes import Refused, Repair
from dataq.audit.chain import ArrivedAsk, Ask, Ends, Hop, Silent, walk
from dataq.audit.classify import classify
from dataq.audit.findings import GOOD, FileClass, Finding, Report
from dataq.audit.hashing import Hashing
from dataq.audit.progress import Progress
from dataq.audit.questions import Answer, AuditDesk
from dataq.audit.relay import this_site
from dataq.audit.sources import Hashed, HashPool, check_directories
from dataq.errors import InvalidRecord
from dataq.feed.watch import WatchOptions
from dataq.record import Record, RecordRules, make_record
from dataq.store import QueueStore

GROUP_FILES = 5000
"""Files hashed before their records are asked about, while the next files hash."""
FIRST_GROUP_FILES = 100
"""Files of the first group: its walk along the chain learns where the chain ends, and every later group is asked
there first (a first group of 5,000 would be followed site by site, each site answering in full)."""
GROUPS_ASKED_AT_ONCE = 2
"""Groups whose questions are out at once: the sites answer one while the next is sent."""
PUSH_CHUNK = 1000
"""Records a repair pushes per write."""
REPAIR_SOURCE = "audit"
"""The source stored with the records a repair pushes."""


@dataclass(frozen=True, slots=True)
class DirectoryAudit:
    """How to audit directories: as which site, with which queue's rules, repairing or not, within which limit."""

    desk: AuditDesk
    rules: RecordRules
    repair: Repair = field(default_factory=Repair)
    progress: bool = False


@dataclass(frozen=True, slots=True)
class DirectoryResult:
    report: Report
    repaired: list[Finding]
    silent: list[Silent]
    """Each site that could not be asked, once."""


async def audit_directories(store: QueueStore, directories: list[WatchOptions], ask: Ask,
                            how: DirectoryAudit, *, arrived_ask: ArrivedAsk | None = None,
                            hashing: Hashing | None = None) -> DirectoryResult:
    """Audit the files of ``directories``, asking the sites with ``ask`` (and the end of the chain, once known, with
    ``arrived_ask``), their files hashed by ``hashing`` (begun earlier; None: begun here); Refused when a directory is
    missing or a repair is above the limit."""
    started = time.time()
    check_directories(directories)
    if hashing is not None:
        return await _audit(store, directories, ask, how, hashing, started, Ends(arrived_ask))
    with HashPool() as pool:
        return await _audit(store, directories, ask, how, Hashing(pool, directories, how.rules.algorithm), started,
                            Ends(arrived_ask))


async def _audit(store: QueueStore, directories: list[WatchOptions], ask: Ask, how: DirectoryAudit,
                 hashing: Hashing, started: float, ends: Ends) -> DirectoryResult:
    progress = Progress("files audited", 0, enabled=how.progress)
    findings: list[Finding] = []
    readable: list[Hashed] = []
    arrived: list[str] = []
    """The paths of the files that arrived: counted, and no :class:`Finding` made of each."""
    proven: dict[str, Answer] = {}
    """The end of the chain's answers that prove each id's file arrived there, by id."""
    journeys: dict[str, list[Hop]] = {}
    asked: set[str] = set()
    later: list[Hashed] = []
    asking: list[asyncio.Task[None]] = []
    at_once = asyncio.Semaphore(GROUPS_ASKED_AT_ONCE)
    first_walked = asyncio.Event()
    """Set once the first group has been asked about: the later groups wait for it, to be asked at the end of the
    chain its walk learnt (if it learnt it: else they go on as it did, side by side)."""

    def place(items: list[Hashed]) -> None:
        """Classify ``items``, whose records have been asked about."""
        for item in items:
            if item.checksum in proven:
                arrived.append(item.path)
                continue
            finding = classify(item.path, item.checksum, journeys[item.checksum])
            if finding.file_class in GOOD:
                arrived.append(item.path)
            else:
                findings.append(finding)

    async def ask_about(ids: list[str], items: list[Hashed], first: bool) -> None:
        """Ask about ``ids``, then classify ``items`` (the files whose records they are)."""
        if not first:
            await first_walked.wait()
        try:
            async with at_once:
                # The end of the chain first: what it proves it holds has arrived, wherever else it was.
                found = await ends.arrived(ids, ask)
                proven.update(found)
                rest = [record_id for record_id in ids if record_id not in found]
                if rest:
                    journeys.update(await walk(await this_site(store, how.desk, rest), ask, ends))
        finally:
            first_walked.set()
        place(items)  # while the next groups hash, rather than all at the end

    try:
        # Each group of files is asked about while the next are hashed: the chain's answers take the time the
        # hashing leaves free, instead of following it.
        async for group in hashing.groups(GROUP_FILES, first=FIRST_GROUP_FILES,
                                          tick=progress.tick if progress.enabled else None):
            progress.total = hashing.listed
            unreadable, good = _unreadable(group, how)
            findings += unreadable
            readable += good
            new = sorted({item.checksum for item in good} - asked)
            asked.update(new)
            # A file whose record an earlier group asked about (a copy of another file) is classified last.
            fresh = set(new)
            later += [item for item in good if item.checksum not in fresh]
            if new:
                asking.append(asyncio.create_task(ask_about(new, [item for item in good if item.checksum in fresh],
                                                            first=not asking)))
        await asyncio.gather(*asking)
    finally:
        for task in asking:
            task.cancel()
    progress.total = hashing.listed
    progress.finish()
    findings += [Finding(folder, "", FileClass.UNREADABLE, how.desk.site, f"cannot list it: {why}")
                 for folder, why in hashing.unlisted]
    place(later)
    findings.sort(key=lambda item: item.path)
    report = Report.of(findings, arrived=len(arrived))
    # Kept before any repair: a repair the brakes refuse leaves what the audit found on record all the same.
    await _save(store, directories, findings, arrived, [], how, started)
    if how.repair.enabled:
        repaired = await _repair(store, readable, report, how)
        await _save(store, directories, findings, arrived, repaired, how, started)
    else:
        repaired = []
    silent = {hop.site: hop for hops in journeys.values() for hop in hops if isinstance(hop, Silent)}
    return DirectoryResult(report, repaired, list(silent.values()))


async def _save(store: QueueStore, directories: list[WatchOptions], findings: list[Finding], arrived: list[str],
                repaired: list[Finding], how: DirectoryAudit, started: float) -> None:
    """Keep each directory's audit (:meth:`QueueStore.save_audit`): its counts per class and its repairs."""
    for options in directories:
        root = options.root
        prefix = root.rstrip("/") + "/"
        part = Report.of([item for item in findings if item.path.startswith(prefix)],
                         arrived=len(arrived) if len(directories) == 1 else
                         sum(1 for path in arrived if path.startswith(prefix)))
        await store.save_audit(f"dir:{root}", {
            "kind": "directory", "directory": root, "site": how.desk.site, "at": round(started, 3),
            "seconds": round(time.time() - started, 3), "files": part.files, "counts": part.counts,
            "repaired": sum(1 for item in repaired if item.path.startswith(prefix)), **part.kept()})


def _unreadable(hashed: list[Hashed], how: DirectoryAudit) -> tuple[list[Finding], list[Hashed]]:
    """Findings for the files that could not be read or whose checksum the queue refuses, and the others."""
    findings, readable = [], []
    pattern = how.rules.compiled
    for item in hashed:
        if item.error is None:
            if pattern.fullmatch(item.checksum) is not None:  # a digest's hex digits: the queue's pattern alone
                readable.append(item)
                continue
            try:
                how.rules.check_checksum(item.checksum)
            except InvalidRecord as exc:
                findings.append(Finding(item.path, item.checksum, FileClass.UNREADABLE, how.desk.site, str(exc)))
                continue
            readable.append(item)
        else:
            findings.append(Finding(item.path, "", FileClass.UNREADABLE, how.desk.site,
                                    f"cannot read it: {item.error}"))
    return findings, readable


async def _repair(store: QueueStore, readable: list[Hashed], report: Report, how: DirectoryAudit) -> list[Finding]:
    """Feed the files no site knows, send the lost ones again (marked again); the findings repaired."""
    repairs = [item for item in report.findings if item.file_class in (FileClass.NEVER_FED, FileClass.LOST)]
    try:
        how.repair.check(len(repairs), report.files)
    except Refused as exc:
        raise Refused(str(exc), report) from None
    sizes = {item.path: item.size for item in readable}
    records: list[Record] = []
    for item in repairs:
        record = make_record(item.path, item.record_id, sizes[item.path], how.rules)
        records.append(replace(record, again=True) if item.file_class is FileClass.LOST else record)
    for start in range(0, len(records), PUSH_CHUNK):
        await store.push_batch(records[start:start + PUSH_CHUNK], source=REPAIR_SOURCE)
    return [Finding(item.path, item.record_id, item.file_class, item.site,
                    "sent again down the chain" if item.file_class is FileClass.LOST else "fed")
            for item in repairs]
