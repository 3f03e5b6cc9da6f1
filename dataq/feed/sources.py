"""Where ``dataq feed`` gets its records: a file of record lines, or a directory tree it checksums itself.

Both sources yield ``(origin, outcome)`` pairs: ``origin`` says where the record came from (``FILE:LINE`` or
the file's path) and ``outcome`` is the Record, or the message saying why there is none (the caller reports
those and sends nothing for them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from dataq.checksum import LARGE_FILE_BYTES, hash_file_settled
from dataq.errors import InvalidRecord
from dataq.file_identity import Identity
from dataq.record import DEFAULT_RULES, Record, RecordRules, make_record, parse_line

LINES_PER_READ = 1000
"""Lines read per trip to the reading thread (a slow pipe on stdin must not stall the event loop)."""
PREFETCH_PER_WORKER = 4
"""Files being checksummed ahead of the feeder per worker thread."""
COMMENT = b"#"
"""Lines starting with it are skipped (no record line can: paths start with / and JSON with {)."""

Sourced = tuple[str, Record | str]


def list_files(root: str) -> list[tuple[str, int]]:
    """Absolute paths and sizes of the regular files under ``root`` (symbolic links are not followed), sorted."""
    found: list[tuple[str, int]] = []
    for directory, dirs, files in os.walk(os.path.abspath(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError):  # gone meanwhile: not a file to feed
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode):
                    found.append((path, info.st_size))
    return found


async def scan_tree(
    root: str,
    rules: RecordRules = DEFAULT_RULES,
    *,
    workers: int | None = None,
    on_listed: Callable[[int], None] | None = None,
) -> AsyncIterator[Sourced]:
    """Every file under ``root`` as a Record, its checksum (``rules.algorithm``) computed on one of ``workers``
    threads (with the file's identity if it had settled: :func:`~dataq.checksum.hash_file_settled`), in the order
    the checksums are ready. Files of :data:`LARGE_FILE_BYTES` or more have ``workers``
    threads of their own, so a large file holds up no small one behind it.

    ``on_listed`` gets the number of files once the tree is listed (for a progress bar).
    """
    files = await asyncio.to_thread(list_files, root)
    if on_listed is not None:
        on_listed(len(files))
    workers = workers or os.cpu_count() or 1
    loop = asyncio.get_running_loop()
    lanes = {large: ThreadPoolExecutor(workers, thread_name_prefix="dataq-checksum") for large in (False, True)}
    pending: dict[asyncio.Future[tuple[str, int, Identity | None]], tuple[int, str]] = {}
    remaining = enumerate(files)

    def refill() -> None:
        while len(pending) < 2 * workers * PREFETCH_PER_WORKER:
            following = next(remaining, None)
            if following is None:
                return
            index, (path, size) = following
            lane = lanes[size >= LARGE_FILE_BYTES]
            pending[loop.run_in_executor(lane, hash_file_settled, path, rules.algorithm)] = (index, path)

    try:
        refill()
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in sorted(done, key=lambda ready: pending[ready][0]):
                _, path = pending.pop(future)
                try:
                    checksum, size, identity = future.result()
                    yield path, make_record(path, checksum, size, rules, identity)
                except OSError as exc:
                    yield path, f"cannot read the file: {exc.strerror or exc}"
                except InvalidRecord as exc:
                    yield path, str(exc)
            refill()
    finally:
        for future in pending:
            future.cancel()
        for lane in lanes.values():
            lane.shutdown(wait=False, cancel_futures=True)


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
