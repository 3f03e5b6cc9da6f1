"""One run of taking watched files in (:meth:`Intake.take_files <dataq.feed.intake.Intake.take_files>`): a job per
file, their looks gathered into batches (:mod:`dataq.feed.examine`), and the spool's writer, all in one task group,
so the first failure (the spool unusable, a bug) ends them all and is what the run raises.

Files are looked at in batches: one that comes alone 3 ms after it was seen, those of a burst together once it
pauses (:data:`EXAMINE_STREAM_GAP`). A small file is looked at and checksummed on the event loop itself, a few
milliseconds' worth at a time (the rest of a batch goes to a pool of threads); a larger one on threads of its own
(hashlib releases the GIL, so several files hash at once), in large blocks. Threads would cost a burst of small
files more than their hashing: every read, stat and hash releases the GIL, and with the event loop busy each
release was a hand-over between threads (some 70 futex calls a file).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from dataq.errors import InvalidRecord
from dataq.feed.examine import Examined, Look, examine_all, hash_file
from dataq.feed.spool import Entry
from dataq.logs import get_logger
from dataq.record import make_record
from dataq.runtime.batching import MicroBatcher

if TYPE_CHECKING:
    from dataq.feed.intake import Intake

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

log = get_logger()


class FileIntake:
    """Takes the files of one ``paths`` source into ``intake``'s spool (see the module's docstring)."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self.algorithm = intake.rules.algorithm
        workers = intake.workers
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="dataq-checksum")
        self.large_files = ThreadPoolExecutor(workers, thread_name_prefix="dataq-checksum-large")
        """Threads of the files not hashed where they are looked at (INLINE_BYTES or more on the event loop,
        LARGE_FILE_BYTES or more on a checksum thread)."""
        self.abort = threading.Event()
        """Set when the run ends: reads under way stop at their next block, so a big file cannot hold up a stop."""
        # Files that arrive together are looked at together: one trip to a thread, if need be, serves them all.
        self.examiner: MicroBatcher[str, Examined] = MicroBatcher(
            self._examine_batch, size=EXAMINE_BATCH, age=EXAMINE_AGE, in_flight=workers,
            stream_gap=EXAMINE_STREAM_GAP, stream_age=EXAMINE_STREAM_AGE)
        self.slots = asyncio.Semaphore(workers * FILES_PER_WORKER)
        self.jobs: set[asyncio.Task[None]] = set()
        self.in_progress: dict[str, bool] = {}
        """Paths being taken -> whether they were seen again meanwhile (then they are looked at once more)."""
        self.unreadable: set[str] = set()

    async def run(self, paths: AsyncIterable[str]) -> None:
        """Take each path of ``paths`` until it ends, then wait for every file's record to be in the spool."""
        source = aiter(paths)
        try:
            async with asyncio.TaskGroup() as group:
                writer = group.create_task(self.intake.write_batches(), name="spool-writer")
                # A failure in the group cancels this loop's wait on the source too: the watcher stops at once.
                async for path in source:
                    if path in self.in_progress:
                        self.in_progress[path] = True
                        continue
                    await self.slots.acquire()
                    self.in_progress[path] = False
                    job = group.create_task(self._take(path))
                    self.jobs.add(job)
                    job.add_done_callback(self._ended)
                if self.jobs:
                    await asyncio.wait(set(self.jobs))
                await self.intake.end_batches(writer)
        except BaseExceptionGroup as failed:
            raise first_error(failed) from None
        finally:
            await _close_source(source)
            self.abort.set()
            for threads in (self.pool, self.large_files):
                await asyncio.to_thread(threads.shutdown, wait=True, cancel_futures=True)

    def _ended(self, job: asyncio.Task[None]) -> None:
        self.jobs.discard(job)
        self.slots.release()

    async def _examine_batch(self, paths: list[str]) -> list[Examined]:
        intake, abort = self.intake, self.abort
        outcomes = examine_all(paths, intake.known, self.algorithm, abort, small=INLINE_BYTES,
                               until=time.monotonic() + INLINE_BUDGET) if intake.on_loop else []
        if len(outcomes) < len(paths):  # out of time: the rest on a thread
            rest = functools.partial(examine_all, paths[len(outcomes):], intake.known, self.algorithm, abort)
            outcomes += await asyncio.get_running_loop().run_in_executor(self.pool, rest)
        return outcomes

    async def _take(self, path: str) -> None:
        intake = self.intake
        try:
            while True:
                try:
                    entry = await self._entry_for(path)
                except FileNotFoundError:
                    log.warning("file vanished before it was sent; dropped", path=path)
                    entry = None
                except PermissionError as exc:
                    intake.failed += 1
                    if path not in self.unreadable:  # once: it is tried again every 30 s
                        self.unreadable.add(path)
                        log.error("cannot read a watched file; trying again later", path=path,
                                  error=exc.strerror or str(exc))
                    if intake.on_unreadable is not None:
                        intake.on_unreadable(path)
                    entry = None
                except (OSError, ValueError) as exc:  # an I/O error, a name SQLite cannot take...: this file only
                    intake.failed += 1
                    log.error("cannot feed a watched file", path=path, error=getattr(exc, "strerror", None) or str(exc))
                    entry = None
                if entry is not None:
                    await intake.keep(entry)
                if not self.in_progress.get(path):
                    return
                self.in_progress[path] = False  # seen again while hashed: look once more
        finally:
            self.in_progress.pop(path, None)

    async def _entry_for(self, path: str) -> Entry | None:
        # One trip to a checksum thread per batch of files: look, ask the spool, read (a large file: a second
        # trip, to the large files' threads).
        examined = await self.examiner.submit(path)
        if examined.look is Look.LARGE:
            assert examined.key is not None
            examined = await asyncio.get_running_loop().run_in_executor(
                self.large_files, hash_file, path, examined.key, self.algorithm, self.abort)
        intake = self.intake
        match examined.look:
            case Look.FAILED:
                assert examined.error is not None
                raise examined.error
            case Look.KNOWN:
                intake.skipped += 1
                return None
            case Look.HASHED:
                assert examined.key is not None
                try:
                    record = make_record(path, examined.checksum, examined.key.size, intake.rules, examined.identity)
                except InvalidRecord as exc:
                    intake.failed += 1
                    log.error("a watched file cannot be a record; not fed", path=path, error=str(exc))
                    return None
                return intake.hashed(record, examined.key)
            case _:
                return None


def first_error(failed: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first failure of a task group (its tasks' cancellations are not in it)."""
    first = failed.exceptions[0]
    return first_error(first) if isinstance(first, BaseExceptionGroup) else first


async def _close_source(source: AsyncIterator[str]) -> None:
    """End the watcher (its tasks, its inotify descriptor) with intake."""
    close = getattr(source, "aclose", None)
    if close is not None:
        with contextlib.suppress(RuntimeError, asyncio.CancelledError):
            await close()
