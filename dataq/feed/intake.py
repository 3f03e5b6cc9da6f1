"""Intake: from complete files (or ready records) to records kept in the spool.

Files are looked at in batches: one that comes alone 3 ms after it was seen, those of a burst together once it
pauses (:data:`EXAMINE_STREAM_GAP`). A small watched file is looked at and checksummed on the event loop itself, a
few milliseconds' worth at a time (the rest of a batch goes to a pool of threads); a larger one on threads of its
own (hashlib releases the GIL, so several files hash at once), in large blocks. Threads would cost a burst of small
files more than their hashing: every read, stat and hash releases the GIL, and with the event loop busy each release
was a hand-over between threads (some 70 futex calls a file). Its (path, size, mtime, inode) is asked of the spool
first: a version of a file already taken in is neither hashed nor sent again, across restarts too. A file that
changes while it is hashed is dropped for now (its writer's close, or the next scan, brings it back); one that
vanishes is dropped with a warning. A file that had settled before it was read sends its identity with its record
(:mod:`dataq.file_identity`), so that the actions need not read it again to prove the checksum. Records reach the
spool in batches, one fsynced transaction each, and then wake the forwarder.

When the spool's disk is full, intake stops (with one error logged) and tries the same batch again until there
is room, while the forwarder goes on sending: the watcher's paths wait meanwhile, and the scan at the next start
finds anything that waited in vain.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from dataq.checksum import LARGE_FILE_BYTES, hash_fd
from dataq.errors import InvalidRecord, SpoolFull
from dataq.feed.forward import Forwarder
from dataq.feed.spool import Entry, FileKey, Spool
from dataq.file_identity import Identity, settled
from dataq.logs import get_logger
from dataq.record import DEFAULT_RULES, Record, RecordRules, format_line, make_record
from dataq.runtime.backoff import Backoff
from dataq.runtime.batching import MicroBatcher

EXAMINE_BATCH = 64
"""Files looked at together at most (on the event loop, or in one trip to a checksum thread)."""
EXAMINE_AGE = 0.003
"""Seconds a file that comes alone (or in a trickle) waits for others to be looked at with it."""
EXAMINE_STREAM_GAP = 0.02
"""Files closer together than this (50 files a second or more) stream in: a batch of them gathers until they pause
for this long, :data:`EXAMINE_STREAM_AGE` at most. The files of a burst then go on in batches of tens (one spool
transaction, one wake of the forwarder, one write to the push daemon, one claim of the pop daemon each), not of
two or three; a trickle's files wait only :data:`EXAMINE_AGE`."""
EXAMINE_STREAM_AGE = 0.2
"""Seconds at most a file of a stream waits for others (measured, ``bench/lsyncd.py``, a burst of 1,000: the
feeder's, push daemon's and Redis's CPU seconds fell by half or more against batches cut after 3 ms)."""
INLINE_BYTES = 1 << 20
"""Files smaller than this are looked at on the event loop (1 MiB: about 2 ms of md5); larger ones on threads."""
INLINE_BUDGET = 0.005
"""Seconds of the event loop one batch may take; what is left of it goes to a checksum thread."""
FILES_PER_WORKER = EXAMINE_BATCH
"""Files being looked at per checksum thread: a batch each (small files are mostly waiting: a stat, a read, the
spool)."""
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
    ) -> None:
        """``on_unreadable`` gets the path of a file this feeder may not read (a writer's chmod comes later);
        ``on_loop=False`` looks at every file on a thread (a network file system, whose reads may hang)."""
        self.spool, self.forwarder, self.rules = spool, forwarder, rules
        self.on_unreadable = on_unreadable
        self.workers = workers or os.cpu_count() or 1
        self.on_loop = on_loop
        self._examiner: MicroBatcher[str, Examined | OSError | ValueError] | None = None
        """Gathers the files to look at into batches for the checksum threads (while :meth:`take_files` runs)."""
        self._large_files: ThreadPoolExecutor | None = None
        """Threads of the files not hashed where they are looked at (INLINE_BYTES or more on the event loop,
        LARGE_FILE_BYTES or more on a checksum thread), beside the pool of :meth:`take_files` (while it runs)."""
        self.taken = 0
        self.skipped = 0
        self.failed = 0
        self._batches: asyncio.Queue[list[Entry] | None] = asyncio.Queue(QUEUED_BATCHES)
        self._batch: list[Entry] = []
        self._in_progress: dict[str, bool] = {}
        """Paths being hashed -> whether they were seen again meanwhile (then they are looked at once more)."""
        self._uncommitted: set[FileKey] = set()
        """Files hashed whose records are not in the spool yet: seen again meanwhile, they are not hashed again."""
        self._abort = threading.Event()
        self._unreadable: set[str] = set()
        self._failed: asyncio.Future[None] | None = None
        """Set with the error that stops intake (the spool unusable): whoever waits on intake sees it."""

    async def take_files(self, paths: AsyncIterable[str]) -> None:
        """Checksum each complete file of ``paths`` and keep its record, until ``paths`` ends; a failure of the
        spool (damaged, unusable) ends it at once."""
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="dataq-checksum")
        loop = asyncio.get_running_loop()
        # Files that arrive together are looked at together: one trip to a thread, if need be, serves them all.
        async def examine(paths: list[str]) -> list[Examined | OSError | ValueError]:
            outcomes = self._examine_all(paths, INLINE_BYTES, time.monotonic() + INLINE_BUDGET) if self.on_loop \
                else []
            if len(outcomes) < len(paths):  # out of time: the rest on a thread
                outcomes += await loop.run_in_executor(pool, self._examine_all, paths[len(outcomes):])
            return outcomes

        self._examiner = MicroBatcher(examine, size=EXAMINE_BATCH, age=EXAMINE_AGE, in_flight=self.workers,
                                      stream_gap=EXAMINE_STREAM_GAP, stream_age=EXAMINE_STREAM_AGE)
        large_files = self._large_files = ThreadPoolExecutor(self.workers, thread_name_prefix="dataq-checksum-large")
        slots = asyncio.Semaphore(self.workers * FILES_PER_WORKER)
        jobs: set[asyncio.Task[None]] = set()
        failed = self._failed = asyncio.get_running_loop().create_future()

        def ended(task: asyncio.Task[None]) -> None:
            jobs.discard(task)
            slots.release()
            if not task.cancelled() and (error := task.exception()) is not None:
                self._fail(error)

        writer = asyncio.create_task(self._write_batches(), name="spool-writer")
        source = aiter(paths)

        async def consume() -> None:
            async for path in source:
                if path in self._in_progress:
                    self._in_progress[path] = True
                    continue
                await slots.acquire()
                self._in_progress[path] = False
                job = asyncio.create_task(self._take_file(path, pool))
                jobs.add(job)
                job.add_done_callback(ended)
            await asyncio.gather(*jobs)
            await self._end_batches(writer)

        # The paths are taken in one task raced once against a failure, not each path against it: a wait per
        # path costs a task and a future each, a fair share of a small file's whole cost in a burst.
        consuming = asyncio.create_task(consume(), name="take-files")
        try:
            await asyncio.wait({consuming, failed}, return_when=asyncio.FIRST_COMPLETED)
            if failed.done():
                failed.result()
            consuming.result()
        finally:
            if not consuming.done():
                consuming.cancel()  # the source's await is cancelled with it: the watcher stops
            cancelled = False
            while not consuming.done():  # a second cancel must not leave the watcher half stopped
                try:
                    await asyncio.wait({consuming})
                except asyncio.CancelledError:
                    cancelled = True
            if not consuming.cancelled():
                consuming.exception()  # retrieved: raised above, or superseded by what is raised
            await _close_source(source)
            for job in jobs:
                job.cancel()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            if failed.done() and not failed.cancelled():
                failed.exception()  # retrieved: raised above, or superseded by what is raised
            # Reads under way stop at their next block: a big file must not hold up a stop.
            self._abort.set()
            for threads in (pool, large_files):
                await asyncio.to_thread(threads.shutdown, wait=True, cancel_futures=True)
            if cancelled:
                raise asyncio.CancelledError  # the second cancel, passed on once intake has stopped

    async def take_records(self, records: AsyncIterable[Record]) -> None:
        """Keep every record of ``records`` (made elsewhere: a file of record lines, a scan)."""
        failed = self._failed = asyncio.get_running_loop().create_future()
        writer = asyncio.create_task(self._write_batches(), name="spool-writer")
        try:
            async for record in records:
                await self._keep(entry_of(record))
                if failed.done():
                    failed.result()
            await self._end_batches(writer)
            if failed.done():
                failed.result()
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    def _fail(self, error: BaseException) -> None:
        if self._failed is not None and not self._failed.done():
            self._failed.set_exception(error)

    async def _take_file(self, path: str, pool: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    entry = await self._entry_for(path, loop, pool)
                except FileNotFoundError:
                    log.warning("file vanished before it was sent; dropped", path=path)
                    entry = None
                except PermissionError as exc:
                    self.failed += 1
                    if path not in self._unreadable:  # once: it is tried again every 30 s
                        self._unreadable.add(path)
                        log.error("cannot read a watched file; trying again later", path=path,
                                  error=exc.strerror or str(exc))
                    if self.on_unreadable is not None:
                        self.on_unreadable(path)
                    entry = None
                except (OSError, ValueError) as exc:  # an I/O error, a name SQLite cannot take...: this file only
                    self.failed += 1
                    log.error("cannot feed a watched file", path=path, error=getattr(exc, "strerror", None) or str(exc))
                    entry = None
                if entry is not None:
                    await self._keep(entry)
                if not self._in_progress.get(path):
                    return
                self._in_progress[path] = False  # seen again while hashed: look once more
        finally:
            self._in_progress.pop(path, None)

    async def _entry_for(self, path: str, loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor) -> Entry | None:
        # One trip to a checksum thread per batch of files: look, ask the spool, read (a large file: a second
        # trip, to the large files' threads).
        assert self._examiner is not None
        examined = await self._examiner.submit(path)
        if isinstance(examined, BaseException):
            raise examined
        if isinstance(examined, _Large):
            assert self._large_files is not None
            examined = await loop.run_in_executor(self._large_files, self._hash, path, examined.key)
        if examined is None:
            return None
        if isinstance(examined, FileKey):
            self.skipped += 1
            return None
        key, hashed, identity = examined
        try:
            record = make_record(path, hashed, key.size, self.rules, identity)
        except InvalidRecord as exc:
            self.failed += 1
            log.error("a watched file cannot be a record; not fed", path=path, error=str(exc))
            return None
        self._uncommitted.add(key)
        return entry_of(record, key)

    async def _keep(self, entry: Entry) -> None:
        self._batch.append(entry)
        if len(self._batch) >= BATCH or self._batches.empty():
            batch, self._batch = self._batch, []
            await self._batches.put(batch)

    async def _end_batches(self, writer: asyncio.Task[None]) -> None:
        if self._batch:
            batch, self._batch = self._batch, []
            await self._batches.put(batch)
        await self._batches.put(None)
        await writer

    async def _write_batches(self) -> None:
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
            if self._failed is None or not self._failed.done():
                try:
                    await self._add(batch)
                except Exception as exc:  # the spool is unusable: tell intake, and go on draining its batches
                    self._fail(exc)
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


    def _examine_all(self, paths: list[str], small: int = LARGE_FILE_BYTES,
                     until: float | None = None) -> list[Examined | OSError | ValueError]:
        """:meth:`_examine` of each path (files of ``small`` bytes or more are only looked at), in order, the first
        always and the others until ``until`` (monotonic); what failed for a file is its own outcome."""
        outcomes: list[Examined | OSError | ValueError] = []
        for path in paths:
            if outcomes and until is not None and time.monotonic() > until:
                break
            try:
                outcomes.append(self._examine(path, small))
            except (OSError, ValueError) as exc:
                outcomes.append(exc)
        return outcomes

    def _examine(self, path: str, small: int) -> Examined:
        """(The file's key, its checksum); the key alone if the spool has this version of the file already; None
        if it is no regular file or changed while it was read (its writer's close brings it back); a file of
        ``small`` bytes or more is only looked at (:class:`_Large`)."""
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return None
        key = FileKey.of(path, info)
        if key in self._uncommitted or self.spool.known_here(key):
            return key
        if key.size >= small:
            return _Large(key)  # hashed on the large files' threads: small files do not wait behind it
        return self._hash(path, key)

    def _hash(self, path: str, key: FileKey) -> Hashed | None:
        hashed = _hash_unchanged(path, key, self.rules.algorithm, self._abort)
        if hashed is None:
            log.debug("file changed while it was read; waiting for its writer", path=path)
            return None
        return key, *hashed


class _Large(NamedTuple):
    """A file to hash on the large files' threads."""

    key: FileKey


Hashed = tuple[FileKey, str, Identity | None]
"""A file's key, its checksum, and its identity if it had settled before it was read."""
Examined = Hashed | FileKey | _Large | None
"""What looking at a file found (see :meth:`Intake._examine`)."""


def _hash_unchanged(path: str, key: FileKey, algorithm: str,
                    abort: threading.Event) -> tuple[str, Identity | None] | None:
    """The checksum of the file at ``path`` if it is still the version ``key`` after reading it, else None; with
    the file's identity if it had settled before the read (:func:`dataq.file_identity.settled`)."""
    # O_NONBLOCK: a FIFO put in the file's place must not hang the open (it then fails the key check below).
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        started = time.time_ns()
        if FileKey.of(path, os.fstat(fd)) != key:
            return None
        checksum, size = hash_fd(fd, algorithm, abort)
        read = os.fstat(fd)
        if size != key.size or FileKey.of(path, read) != key:
            return None
    finally:
        os.close(fd)
    try:
        after = os.lstat(path)
    except FileNotFoundError:
        return checksum, None  # read whole; its removal is the forwarder's to notice
    if FileKey.of(path, after) != key:
        return None
    # The identity the path has now (lstat, not the descriptor's: a file renamed over it since is another file).
    return checksum, settled(after, started) if (after.st_dev, after.st_ino) == (read.st_dev, read.st_ino) else None


async def _close_source(source: AsyncIterator[str]) -> None:
    """End the watcher (its tasks, its inotify descriptor) with intake."""
    close = getattr(source, "aclose", None)
    if close is not None:
        with contextlib.suppress(RuntimeError, asyncio.CancelledError):
            await close()
