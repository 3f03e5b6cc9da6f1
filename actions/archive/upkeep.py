"""The ingest's upkeep of its catalog, in the background after its appends: compaction of the partition it
appends to once it holds ``compact_files`` small files, and removal of the files compactions replaced once their
grace is over. Nothing here holds up a batch; a failure is logged and the next append tries again.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from dataq.actions.archive.catalog_files import garbage_due
from dataq.logs import get_logger
from dataq.runtime.supervise import cancel_and_wait

if TYPE_CHECKING:
    from dataq.actions.archive.compaction import Lease

GARBAGE_CHECK_INTERVAL = 60.0
"""Seconds between two looks for replaced files whose grace is over (each look reads every partition)."""

log = get_logger()


class CatalogUpkeep:
    """One compaction (or removal) at a time, started after an append when one is due."""

    def __init__(self, catalog_path: str, lease: Lease, *, compact_files: int, target_bytes: int,
                 grace: float) -> None:
        self.catalog_path, self.lease = catalog_path, lease
        self.compact_files, self.target_bytes, self.grace = compact_files, target_bytes, grace
        self._task: asyncio.Task[None] | None = None
        self._next_garbage_check = 0.0

    def after_append(self, spark: Any, partition: str) -> None:
        """Look at ``partition`` (just appended to) in the background, unless a look is under way or
        ``compact_files`` is 0 (compaction left to ``dataq archive compact``)."""
        if self.compact_files and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._run(spark, partition), name=f"archive upkeep {partition}")

    async def close(self, *, within: float) -> None:
        """Wait up to ``within`` seconds for a running compaction, then cancel it: a publication it began still
        ends (:func:`dataq.actions.files.finish_in_thread`); a rewrite not yet published is only work lost."""
        if self._task is None or self._task.done():
            return
        done, _ = await asyncio.wait([self._task], timeout=max(0.0, within))
        if not done:
            log.warning("archive compaction still running at shutdown; stopped")
            await cancel_and_wait([self._task])  # its lease's Redis calls may lose a single cancel

    async def _run(self, spark: Any, partition: str) -> None:
        from dataq.actions.archive.compaction import compact, due

        try:
            inputs = await asyncio.to_thread(due, self.catalog_path, partition, self.target_bytes, self.compact_files)
            if not inputs:
                if time.monotonic() < self._next_garbage_check:
                    return
                self._next_garbage_check = time.monotonic() + GARBAGE_CHECK_INTERVAL
                if not await asyncio.to_thread(garbage_due, self.catalog_path, self.grace):
                    return
            done, removed = await compact(spark, self.catalog_path, self.lease, dates=[partition] if inputs else [],
                                          target_bytes=self.target_bytes, min_files=self.compact_files,
                                          grace=self.grace)
        except Exception as exc:  # the catalog stays as it was: the next append tries again
            log.warning("archive compaction failed", partition=partition,
                        error=(str(exc).splitlines() or [type(exc).__name__])[0][:500])
            return
        for compacted in done:
            log.info("archive partition compacted", partition=partition, files=len(compacted.replaced),
                     rows=compacted.rows, bytes_before=compacted.bytes_before, bytes_after=compacted.bytes_after)
        if removed:
            log.info("archive files replaced by compaction removed", files=removed)
