"""One storing root audited (``dataq audit --copies``) and, with ``repair``, put right: each missing or damaged copy's
record is marked lost at this site (its remembered done state forgotten, an event written), and a damaged copy is
moved into the quarantine first, so that the record, sent again, is stored anew under its name."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

from dataq.audit import copies
from dataq.audit.brakes import Refused, Repair, check_root
from dataq.audit.findings import FileClass, Finding, Report
from dataq.audit.progress import Progress
from dataq.audit.quarantine import quarantine
from dataq.store import QueueStore, Tracked

WHEREABOUTS_CHUNK = 1000
"""Ids asked about per round trip."""
SUSPECT = frozenset({FileClass.MISSING_COPY, FileClass.CORRUPT_COPY})
"""What may be a copy being stored again rather than a lost one."""


@dataclass(frozen=True, slots=True)
class CopiesAudit:
    """How to audit copies, as site ``site``: re-read every copy (``deep``) or not, repair or not."""

    site: str
    deep: bool = False
    repair: Repair = field(default_factory=Repair)
    progress: bool = False


@dataclass(frozen=True, slots=True)
class RootResult:
    report: Report
    repaired: list[Finding]


def target_of(root: str) -> str:
    """The name a root's last audit is kept under (:meth:`QueueStore.save_audit`)."""
    return f"copies:{root}"


async def audit_root(store: QueueStore, root: str, max_errors: int, how: CopiesAudit,
                     skip: tuple[str, ...] = ()) -> RootResult:
    """Audit ``root`` (the storing root of ``store``'s queue; ``skip``: its top folders that hold no copies);
    Refused when it looks unmounted or replaced, or a repair would touch more than the limit allows."""
    started = time.time()
    last = (await store.audits()).get(target_of(root), {})
    exists = await asyncio.to_thread(os.path.isdir, root)
    state = await asyncio.to_thread(copies.state_of, root, skip) if exists else copies.RootState({}, False)
    check_root(root, exists, len(state.entries), state.holds_files, last.get("named"))
    progress = Progress(f"copies under {root}", len(state.entries), enabled=how.progress)
    checked = await asyncio.to_thread(copies.check_copies, root, state.entries, how.site, deep=how.deep,
                                      tick=progress.tick)
    dark = await asyncio.to_thread(lambda: list(copies.dark_files(root, state.entries, how.site, skip)))
    progress.finish()
    report = Report.of([*await _being_stored_again(store, checked, max_errors), *dark])
    result = {"kind": "copies", "root": root, "site": how.site, "at": round(started, 3),
              "seconds": round(time.time() - started, 3), "deep": how.deep, "named": len(state.entries),
              "files": report.files, "counts": report.counts, "repaired": 0, **report.kept()}
    # Kept before any repair: a repair the brakes refuse leaves what the audit found on record all the same.
    await store.save_audit(target_of(root), result)
    repaired: list[Finding] = []
    if how.repair.enabled:
        repairs = report.repairable()
        try:
            how.repair.check(len(repairs), report.files)
        except Refused as exc:
            raise Refused(str(exc), report) from None
        repaired = await _repair(store, root, repairs)
        await store.save_audit(target_of(root), {**result, "repaired": len(repaired)})
    return RootResult(report, repaired)


async def _being_stored_again(store: QueueStore, checked: list[Finding], max_errors: int) -> list[Finding]:
    """A missing or damaged copy whose record this site tracks again (sent again, being stored) is in flight."""
    suspect = [item.record_id for item in checked if item.file_class in SUSPECT]
    tracked: dict[str, Tracked] = {}
    for start in range(0, len(suspect), WHEREABOUTS_CHUNK):
        chunk = suspect[start:start + WHEREABOUTS_CHUNK]
        for record_id, known in zip(chunk, await store.whereabouts(chunk, max_errors), strict=True):
            if isinstance(known, Tracked):
                tracked[record_id] = known
    return [_in_flight(item, tracked[item.record_id]) if item.file_class in SUSPECT and item.record_id in tracked
            else item for item in checked]


def _in_flight(item: Finding, known: Tracked) -> Finding:
    return Finding(item.path, item.record_id, FileClass.IN_FLIGHT, item.site,
                   f"being stored again ({known.state}); {item.detail}")


async def _repair(store: QueueStore, root: str, repairs: list[Finding]) -> list[Finding]:
    """Quarantine each damaged copy, then mark every repaired copy's record lost here."""
    lost: list[tuple[str, str]] = []
    done: list[Finding] = []
    for item in repairs:
        why = f"{item.file_class.value}: {item.detail}"
        if item.file_class is FileClass.MISSING_COPY and await asyncio.to_thread(os.path.lexists, item.path):
            continue  # stored again since it was checked: nothing to repair
        if item.file_class is FileClass.CORRUPT_COPY:
            try:
                moved = await asyncio.to_thread(quarantine, root, item.path)
            except OSError as exc:  # left where it is: not marked lost, so reported again next time
                done.append(Finding(item.path, item.record_id, FileClass.UNREADABLE, item.site,
                                    f"cannot move it into the quarantine: {exc.strerror or exc}"))
                continue
            why += f"; moved to {moved}"
        lost.append((item.record_id, why))
        done.append(Finding(item.path, item.record_id, item.file_class, item.site, f"marked lost: {why}"))
    marked = iter(await store.mark_lost(lost))
    # A record this site tracks again (sent again meanwhile) is left alone by mark_lost: it is being stored.
    return [item if item.file_class is FileClass.UNREADABLE or next(marked) else
            Finding(item.path, item.record_id, FileClass.IN_FLIGHT, item.site, "being stored again; not marked lost")
            for item in done]
