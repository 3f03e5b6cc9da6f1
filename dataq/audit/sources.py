"""The files an audit of a directory looks at, each hashed with the queue's checksum on every core.

The directory's files are chosen as its watching feeder chooses them (``[feed]`` ``recursive``, ``include`` and
``exclude``, hidden and temporary names skipped: :class:`~dataq.feed.watch.WatchOptions`), so the audit asks about
exactly the files that should have been fed; a file changed within the feeder's ``settle`` seconds is left for
later, as the feeder leaves it (it may still be written).

The listing reads the directories' entries only; each file is opened, looked at (a regular file, settled) and
hashed by a worker process, on every core: looking at 100,000 files one by one before hashing the first would
cost a fifth of md5sum's time for the whole tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import multiprocessing
import os
import signal
import stat
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from dataq.checksum import hash_fd
from dataq.errors import DataqError
from dataq.feed.watch import WatchOptions

CHUNK = 256
"""Files hashed per task at most: enough that sending the task and its answers between processes costs little."""
TASKS_PER_WORKER = 8
"""Tasks per worker at least, whatever the files' sizes (unknown until each is opened): 100 files of 30 MB are
not one task for one core."""
GONE = (errno.ENOENT, errno.ELOOP)
"""A file removed, or replaced by a link, since the directory was listed: no longer one of its files."""


@dataclass(frozen=True, slots=True)
class Hashed:
    """A file and its checksum and size, or why it could not be read."""

    path: str
    checksum: str = ""
    size: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Listing:
    """The files of a directory a feeder would feed, in path order, and the folders beneath it that could not be
    listed (each with why)."""

    files: list[str]
    unlisted: list[tuple[str, str]]


def names_of(options: WatchOptions) -> Listing:
    """The regular files of the directory a feeder with ``options`` would feed (by their directory entries: links
    and special files are not followed or opened); a folder removed while it is listed is passed over, one that
    cannot be read is said."""
    found: list[str] = []
    unlisted: list[tuple[str, str]] = []
    folders = [options.root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        if options.enters(entry.path):
                            folders.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and options.wanted(entry.path):
                        found.append(entry.path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            unlisted.append((folder, exc.strerror or str(exc)))
    found.sort()
    return Listing(found, sorted(unlisted))


def settled_before(options: WatchOptions, now: float | None = None) -> int:
    """The newest modification time (ns) of a file the audit looks at: one unchanged for ``settle`` seconds."""
    return int(((time.time() if now is None else now) - options.settle) * 1e9)


Result = tuple[str, int, str | None] | None
"""A file's checksum, size and why it could not be read; None: not one to audit (unsettled, or gone)."""


def _hash_chunk(paths: Sequence[str], algorithm: str, newest_ns: int) -> list[Result]:
    """Each file's :data:`Result`, in a worker process."""
    done: list[Result] = []
    for path in paths:
        try:
            # Not following a link, nor waiting on a FIFO put in a file's place since the listing.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            done.append(None if exc.errno in GONE else ("", 0, exc.strerror or str(exc)))
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_mtime_ns > newest_ns:
                done.append(None)
                continue
            checksum, size = hash_fd(fd, algorithm)
            done.append((checksum, size, None))
        except OSError as exc:
            done.append(("", 0, exc.strerror or str(exc)))
        finally:
            os.close(fd)
    return done


def _started() -> None:
    """A worker's first task: the pool's processes exist once it is done."""


def _worker_signals() -> None:
    """In a worker: Ctrl-C (sent to the whole process group) is the auditing process's to handle; it ends the
    workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class HashPool:
    """Processes that hash files, one per CPU (threads would share one interpreter: 100,000 small files hash at
    two thirds of ``md5sum``'s speed on two cores in threads, at its speed in processes).

    Start it before the auditing process runs any thread of its own: its workers are forked (they start at once,
    importing nothing), and a fork copies only the thread that makes it.
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"),
                                         initializer=_worker_signals)
        self._pool.submit(_started).result()

    def __enter__(self) -> HashPool:
        return self

    def __exit__(self, *_: object) -> None:
        # Whatever ended the audit (done, Ctrl-C, an error), no worker goes on hashing: the exit would wait for it.
        processes = list(getattr(self._pool, "_processes", {}).values())  # the executor has no terminate()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            with contextlib.suppress(OSError):
                process.terminate()

    async def hash_in_groups(self, paths: Sequence[str], algorithm: str, *, group: int, newest_ns: int,
                             tick: Callable[[int], None] | None = None) -> AsyncIterator[list[Hashed]]:
        """Each file modified at ``newest_ns`` or before hashed, in order, yielded ``group`` files at a time as
        soon as they are: the caller asks about a group while the next hash."""
        loop = asyncio.get_running_loop()
        chunk = max(1, min(CHUNK, len(paths) // (self.workers * TASKS_PER_WORKER)))
        starts = range(0, len(paths), chunk)
        futures = [loop.run_in_executor(self._pool, _hash_chunk, paths[start:start + chunk], algorithm, newest_ns)
                   for start in starts]
        try:
            ready: list[Hashed] = []
            for start, future in zip(starts, futures, strict=True):
                try:
                    results = await future
                except BrokenProcessPool as exc:
                    raise DataqError(f"a hashing process of the audit died (killed, or out of memory): {exc}") \
                        from None
                for path, result in zip(paths[start:start + chunk], results, strict=True):
                    if result is None:
                        if tick is not None:
                            tick(0)  # not one to audit: counted as looked at, for the progress line's total
                        continue
                    ready.append(Hashed(path, *result))
                    if tick is not None:
                        tick(result[1])
                if len(ready) >= group:
                    yield ready
                    ready = []
            if ready:
                yield ready
        finally:
            for future in futures:
                future.cancel()
