"""Where ``dataq feed`` gets its records: a file of record lines, or a directory tree it checksums itself.

Both sources yield ``(origin, outcome)`` pairs: ``origin`` says where the record came from (``FILE:LINE`` or
the file's path) and ``outcome`` is the Record, or the message saying why there is none (the caller reports
those and sends nothing for them).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from dataq.checksum import DEFAULT_ALGORITHM, hash_file
from dataq.errors import InvalidRecord
from dataq.record import DEFAULT_RULES, Record, RecordRules, make_record, parse_line

LINES_PER_READ = 1000
"""Lines read per trip to the reading thread (a slow pipe on stdin must not stall the event loop)."""
PREFETCH_PER_WORKER = 4
"""Files being checksummed ahead of the feeder per worker thread."""
COMMENT = b"#"
"""Lines starting with it are skipped (no record line can: paths start with / and JSON with {)."""

Sourced = tuple[str, Record | str]


def list_files(root: str) -> list[str]:
    """Absolute paths of the regular files under ``root`` (symbolic links are not followed), sorted."""
    found: list[str] = []
    for directory, dirs, files in os.walk(os.path.abspath(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(path)
    return found


async def scan_tree(
    root: str,
    rules: RecordRules = DEFAULT_RULES,
    *,
    workers: int | None = None,
    algorithm: str = DEFAULT_ALGORITHM,
    on_listed: Callable[[int], None] | None = None,
) -> AsyncIterator[Sourced]:
    """Every file under ``root`` as a Record, checksums computed by ``workers`` threads, in path order.

    ``on_listed`` gets the number of files once the tree is listed (for a progress bar).
    """
    paths = await asyncio.to_thread(list_files, root)
    if on_listed is not None:
        on_listed(len(paths))
    workers = workers or os.cpu_count() or 1
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="dataq-checksum")
    pending: deque[tuple[str, asyncio.Future[tuple[str, int]]]] = deque()
    remaining = iter(paths)

    def refill() -> None:
        while len(pending) < workers * PREFETCH_PER_WORKER:
            path = next(remaining, None)
            if path is None:
                return
            pending.append((path, loop.run_in_executor(pool, hash_file, path, algorithm)))

    try:
        refill()
        while pending:
            path, future = pending.popleft()
            refill()
            try:
                checksum, size = await future
                yield path, make_record(path, checksum, size, rules)
            except OSError as exc:
                yield path, f"cannot read the file: {exc.strerror or exc}"
            except InvalidRecord as exc:
                yield path, str(exc)
    finally:
        for _, future in pending:
            future.cancel()
        pool.shutdown(wait=False, cancel_futures=True)


async def read_record_file(name: str, rules: RecordRules = DEFAULT_RULES) -> AsyncIterator[Sourced]:
    """The records of a file of record lines (``-``: standard input), as ``dataq-cli --dump`` writes them.

    Blank lines and lines starting with ``#`` are skipped; a malformed line yields its message.
    """
    label = "stdin" if name == "-" else name
    stream: BinaryIO = sys.stdin.buffer if name == "-" else await asyncio.to_thread(open, name, "rb")
    try:
        number = 0
        while lines := await asyncio.to_thread(_read_lines, stream, LINES_PER_READ):
            for line in lines:
                number += 1
                stripped = line.strip()
                if not stripped or stripped.startswith(COMMENT):
                    continue
                try:
                    yield f"{label}:{number}", parse_line(line, rules)
                except InvalidRecord as exc:
                    yield f"{label}:{number}", str(exc)
    finally:
        if name != "-":
            stream.close()


def _read_lines(stream: BinaryIO, count: int) -> list[bytes]:
    lines: list[bytes] = []
    while len(lines) < count and (line := stream.readline()):
        lines.append(line)
    return lines


__all__ = ["list_files", "read_record_file", "scan_tree"]
