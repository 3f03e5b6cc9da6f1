"""The files an audit of a directory looks at, each hashed with the queue's checksum on every core.

The directory's files are chosen as its watching feeder chooses them (``[feed]`` ``recursive``, ``include`` and
``exclude``, hidden and temporary names skipped: :class:`~dataq.feed.watch.WatchOptions`), so the audit asks about
exactly the files that should have been fed.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dataq.checksum import hash_file
from dataq.feed.watch import WatchOptions, list_tree

CHUNK = 64
"""Files hashed per task: few enough to keep every core busy to the end, enough that dispatching costs little."""


@dataclass(frozen=True, slots=True)
class Hashed:
    """A file and its checksum and size, or why it could not be read."""

    path: str
    checksum: str = ""
    size: int = 0
    error: str | None = None


def files_of(options: WatchOptions, now: float | None = None) -> list[str]:
    """The files of the directory a feeder with ``options`` would feed, in path order: those unchanged for its
    ``settle`` seconds (a file still being written is not fed yet, nor audited)."""
    limit = ((time.time() if now is None else now) - options.settle) * 1e9
    return sorted(path for path, (_, mtime_ns, _) in list_tree(options).items() if mtime_ns <= limit)


def _hash_chunk(paths: Sequence[str], algorithm: str, tick: Callable[[int], None] | None) -> list[Hashed]:
    done = []
    for path in paths:
        try:
            checksum, size = hash_file(path, algorithm)
        except OSError as exc:
            done.append(Hashed(path, error=exc.strerror or str(exc)))
            continue
        done.append(Hashed(path, checksum, size))
        if tick is not None:
            tick(size)
    return done


async def hash_in_groups(paths: Sequence[str], algorithm: str, *, group: int,
                         tick: Callable[[int], None] | None = None,
                         workers: int | None = None) -> AsyncIterator[list[Hashed]]:
    """Each file hashed, in order, on ``workers`` threads (default: one per CPU; hashing releases the GIL),
    yielded ``group`` files at a time as soon as they are: the caller asks about a group while the next hash."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(workers or os.cpu_count() or 1, thread_name_prefix="dataq-audit-hash")
    try:
        futures = [loop.run_in_executor(pool, _hash_chunk, paths[start:start + CHUNK], algorithm, tick)
                   for start in range(0, len(paths), CHUNK)]
        ready: list[Hashed] = []
        for future in futures:
            ready += await future
            if len(ready) >= group:
                yield ready
                ready = []
        if ready:
            yield ready
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
