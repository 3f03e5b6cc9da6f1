"""Intake: from complete files (or ready records) to records kept in the spool.

Watched files are taken in by :class:`~dataq.feed.file_intake.FileIntake` (looked at and checksummed in batches);
records made elsewhere (a file of record lines, a scan) as they are. Each file's (path, size, mtime, inode) is asked
of the spool first: a version of a file already taken in is neither hashed nor sent again, across restarts too.
Records reach the spool in batches, one fsynced transaction each, and then wake the forwarder.

When the spool's disk is full, intake stops (with one error logged) and tries the same batch again until there
is room, while the forwarder goes on sending: the watcher's paths wait meanwhile, and the scan at the next start
finds anything that waited in vain. A spool that fails otherwise (damaged, unusable) ends the intake with its error.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterable, Callable
from dataclasses import replace

from dataq.errors import SpoolFull
from dataq.feed.file_intake import FileIntake, first_error
from dataq.feed.forward import Forwarder
from dataq.feed.spool import Entry, FileKey, Spool
from dataq.logs import get_logger
from dataq.record import DEFAULT_RULES, Record, RecordRules, format_line
from dataq.runtime.backoff import Backoff

BATCH = 512
"""Records added to the spool in one transaction at most."""
QUEUED_BATCHES = 4
"""Batches waiting for the spool before intake pushes back on its source."""
FULL_DISK_RETRY_CAP = 10.0
"""Longest wait between two tries to add to a spool whose disk is full."""

log = get_logger()


def entry_of(record: Record, file: FileKey | None = None) -> Entry:
    """A record as the spool keeps it: its wire line (paths from the file system may hold surrogate escapes)."""
    line = (format_line(record, with_identity=True) + "\n").encode("utf-8", "surrogateescape")
    return Entry(line, record.checksum, record.path, file)


class Intake:
    """Puts records into ``spool`` and wakes ``forwarder``; counts what it took and what it could not."""

    def __init__(
        self,
        spool: Spool,
        forwarder: Forwarder,
        rules: RecordRules = DEFAULT_RULES,
        *,
        workers: int | None = None,
        on_unreadable: Callable[[str], None] | None = None,
        on_loop: bool = True,
        activity: str | None = None,
    ) -> None:
        """``on_unreadable`` gets the path of a file this feeder may not read (a writer's chmod comes later);
        ``on_loop=False`` looks at every file on a thread (a network file system, whose reads may hang)."""
        self.spool, self.forwarder, self.rules = spool, forwarder, rules
        self.on_unreadable = on_unreadable
        self.workers = workers or os.cpu_count() or 1
        self.on_loop = on_loop
        self.activity = activity
        """The activity every file's record is fed in (``dataq feed --activity``); None: the queue's globs decide."""
        self.taken = 0
        self.skipped = 0
        self.failed = 0
        self._batches: asyncio.Queue[list[Entry] | None] = asyncio.Queue(QUEUED_BATCHES)
        self._batch: list[Entry] = []
        self._uncommitted: set[FileKey] = set()
        """Files hashed whose records are not in the spool yet: seen again meanwhile, they are not hashed again."""

    async def take_files(self, paths: AsyncIterable[str]) -> None:
        """Checksum each complete file of ``paths`` and keep its record, until ``paths`` ends; a failure of the
        spool (damaged, unusable) ends it at once, with that error."""
        await FileIntake(self).run(paths)

    async def take_records(self, records: AsyncIterable[Record]) -> None:
        """Keep every record of ``records`` (made elsewhere: a file of record lines, a scan)."""
        try:
            async with asyncio.TaskGroup() as group:
                writer = group.create_task(self.write_batches(), name="spool-writer")
                async for record in records:
                    await self.keep(entry_of(record))
                await self.end_batches(writer)
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None

    def known(self, key: FileKey) -> bool:
        """Whether this version of a file is taken in already (in the spool, or hashed and on its way there); asked
        from the checksum threads too."""
        return key in self._uncommitted or self.spool.known_here(key)

    def hashed(self, record: Record, key: FileKey) -> Entry:
        """The entry of a file just hashed, known as on its way to the spool until its batch is added."""
        self._uncommitted.add(key)
        return entry_of(record if self.activity is None else replace(record, activity=self.activity), key)

    async def keep(self, entry: Entry) -> None:
        """Keep ``entry``: in the batch under way, handed to the writer when it is full or the writer is idle."""
        self._batch.append(entry)
        if len(self._batch) >= BATCH or self._batches.empty():
            batch, self._batch = self._batch, []
            await self._batches.put(batch)

    async def end_batches(self, writer: asyncio.Task[None]) -> None:
        """Hand the last batch to ``writer`` and wait until it has added everything."""
        if self._batch:
            batch, self._batch = self._batch, []
            await self._batches.put(batch)
        await self._batches.put(None)
        await writer

    async def write_batches(self) -> None:
        """Add the batches to the spool as they come, until :meth:`end_batches`; raises what makes the spool
        unusable (a full disk is waited out)."""
        while True:
            if self._batch and self._batches.empty():  # what _keep left while this writer was busy
                batch, self._batch = self._batch, []
            elif (queued := await self._batches.get()) is not None:
                batch = queued
            else:
                return
            # What queued meanwhile goes in the same transaction: one fsync for many records.
            end = False
            while len(batch) < BATCH and not self._batches.empty():
                more = self._batches.get_nowait()
                if more is None:
                    end = True
                    break
                batch.extend(more)
            await self._add(batch)
            if end:
                return

    async def _add(self, batch: list[Entry]) -> None:
        backoff = Backoff(initial=0.5, cap=FULL_DISK_RETRY_CAP)
        full = False
        while True:
            try:
                await self.spool.add(batch)
                break
            except SpoolFull as exc:
                if not full:
                    log.error("intake stopped: the spool's disk is full; sending goes on", error=str(exc))
                    full = True
                await backoff.wait()
        if full:
            log.info("intake resumed: the spool has room again", directory=self.spool.directory)
        self.taken += len(batch)
        self._uncommitted.difference_update(entry.file for entry in batch if entry.file is not None)
        self.forwarder.wake()
