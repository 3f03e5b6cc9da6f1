"""The files an audit of a directory looks at, each hashed with the queue's checksum on every core.

The directory's files are chosen as its watching feeder chooses them (``[feed]`` ``recursive``, ``include`` and
``exclude``, hidden and temporary names skipped: :class:`~dataq.feed.watch.WatchOptions`), so the audit asks about
exactly the files that should have been fed; a file changed within the feeder's ``settle`` seconds is left for
later, as the feeder leaves it (it may still be written).

The listing reads the directories' entries only; each file is opened, looked at (a regular file, settled) and
hashed by a worker process, on every core: looking at 100,000 files one by one before hashing the first would
cost a fifth of md5sum's time for the whole tree. :mod:`.hashing` hands the files to the workers as they are
listed.
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import signal
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import NamedTuple

from dataq.audit.brakes import Refused
from dataq.checksum import FileHashing
from dataq.feed.watch import WatchOptions
from dataq.runtime.children import die_with_parent

GONE = (errno.ENOENT, errno.ELOOP)
"""A file removed, or replaced by a link, since the directory was listed: no longer one of its files."""


class Hashed(NamedTuple):
    """A file and its checksum and size, or why it could not be read (a tuple: an audit makes 100,000 of them, and a
    frozen dataclass costs ten times as much to make)."""

    path: str
    checksum: str = ""
    size: int = 0
    error: str | None = None


LISTED_AT_ONCE = 1000
"""Files of a folder handed on to be hashed at once, while the folder is still being listed."""


def listed(options: WatchOptions, unlisted: list[tuple[str, str]]) -> Iterator[list[str]]:
    """The regular files of the directory a feeder with ``options`` would feed (by their directory entries: links
    and special files are not followed or opened), folder by folder, at most :data:`LISTED_AT_ONCE` at a time; a
    folder removed while it is listed is passed over, one that cannot be read is added to ``unlisted`` with why."""
    root = options.root.rstrip("/") + "/"
    folders = [options.root]
    while folders:
        folder = folders.pop()
        relative = folder[len(root):] + "/" if folder != options.root and folder.startswith(root) else ""
        found: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        if options.enters(entry.path):
                            folders.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and options.wanted_in(relative, entry.name):
                        found.append(entry.path)
                        if len(found) >= LISTED_AT_ONCE:
                            yield found
                            found = []
        except FileNotFoundError:
            pass
        except OSError as exc:
            unlisted.append((folder, exc.strerror or str(exc)))
        if found:
            yield found


def check_directories(directories: list[WatchOptions]) -> None:
    """Refused (whatever ``--force`` says) when a directory to audit does not exist or is not a directory."""
    for options in directories:
        if not os.path.isdir(options.root):
            raise Refused(f"{options.root} is not a directory: nothing to audit there (is it mounted?)")


def settled_before(options: WatchOptions, now: float | None = None) -> int:
    """The newest modification time (ns) of a file the audit looks at: one unchanged for ``settle`` seconds."""
    return int(((time.time() if now is None else now) - options.settle) * 1e9)


Result = tuple[str, int, str | None] | None
"""A file's checksum, size and why it could not be read; None: not one to audit (unsettled, or gone)."""


def _hash_chunk(paths: Sequence[str], algorithm: str, newest_ns: int) -> list[Result]:
    """Each file's :data:`Result`, in a worker process."""
    done: list[Result] = []
    hashing = FileHashing(algorithm)
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
            checksum, size = hashing.of_regular_file(fd, info.st_size)
            done.append((checksum, size, None))
        except OSError as exc:
            done.append(("", 0, exc.strerror or str(exc)))
        finally:
            os.close(fd)
    return done


def _started() -> None:
    """A worker's first task: the pool's processes exist once it is done."""


def _worker_signals(arm: Callable[[], None]) -> None:
    """In a worker: Ctrl-C (sent to the whole process group) is the auditing process's to handle; it ends the
    workers itself. ``arm`` ends the worker with the auditing process however that ends (a SIGKILL, a SIGTERM
    before the pool is set up to end them): it would wait for a task for ever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    arm()


class HashPool:
    """Processes that hash files, one per CPU (threads would share one interpreter: 100,000 small files hash at
    two thirds of ``md5sum``'s speed on two cores in threads, at its speed in processes).

    Start it before the auditing process runs any thread of its own: its workers are forked (they start at once,
    importing nothing), and a fork copies only the thread that makes it.
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"),
                                         initializer=_worker_signals, initargs=(die_with_parent(),))
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

    def submit(self, paths: list[str], algorithm: str, newest_ns: int) -> Future[list[Result]]:
        """Hash the files at ``paths`` in a worker: each one's :data:`Result`."""
        return self._pool.submit(_hash_chunk, paths, algorithm, newest_ns)
