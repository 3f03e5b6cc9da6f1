"""The spool's cost per record, for ``bench/feed.py``: :class:`~dataq.feed.spool.Spool` operations one record per
transaction and batched as the intake batches them, against a bare loop of ``pwrite`` + fsync on the same disk (a
commit of the spool, SQLite in WAL mode with ``synchronous = FULL``, costs one fdatasync)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dataq.feed.spool import Entry, FileKey, Spool
from dataq.feed.spool_status import read_spool_status

KIB, MIB = 1024, 1024 * 1024
SPOOL_BATCH = 512
"""Records per transaction when batched: the intake's ``BATCH``."""


@dataclass
class SpoolCosts:
    add_batched: float
    add_single: float
    resolve_batched: float
    resolve_single: float
    known: float
    fsync: float
    fdatasync: float
    """Seconds per record (per call for the bare loops)."""


def entries(start: int, count: int, directory: str) -> list[Entry]:
    made = []
    for n in range(start, start + count):
        path = f"{directory}/f{n:09d}.fits"
        checksum = f"{n:032x}"
        made.append(Entry(f"{path} {checksum} 4096\n".encode(), checksum, path,
                          FileKey(path, 4096, 1_404_777_600_000_000_000 + n, 1000 + n)))
    return made


async def spool_costs(directory: Path, batched_count: int, single_count: int) -> SpoolCosts:
    """Seconds per record of each spool operation, in a spool under ``directory``, and of the bare fsync loops."""
    spool = await Spool(str(directory / "spool")).open()
    try:
        batched = entries(0, batched_count, "/data/incoming")
        single = entries(batched_count, single_count, "/data/incoming")

        began = time.perf_counter()
        for start in range(0, len(batched), SPOOL_BATCH):
            await spool.add(batched[start:start + SPOOL_BATCH])
        add_batched = (time.perf_counter() - began) / len(batched)

        began = time.perf_counter()
        for entry in single:
            await spool.add([entry])
        add_single = (time.perf_counter() - began) / len(single)

        began = time.perf_counter()
        for entry in single:
            spool.known_here(entry.file)  # type: ignore[arg-type]
        known = (time.perf_counter() - began) / len(single)

        seqs = [row.seq for row in await spool.pending(0, len(batched) + len(single))]
        first, rest = seqs[:len(batched)], seqs[len(batched):]
        began = time.perf_counter()
        for start in range(0, len(first), SPOOL_BATCH):
            await spool.resolve(first[start:start + SPOOL_BATCH], [])
        resolve_batched = (time.perf_counter() - began) / len(first)

        began = time.perf_counter()
        for seq in rest:
            await spool.resolve([seq], [])
        resolve_single = (time.perf_counter() - began) / len(rest)
        if read_spool_status(spool.directory).pending:
            raise SystemExit("the spool still holds records after resolving them all")
    finally:
        await spool.close()
    return SpoolCosts(add_batched, add_single, resolve_batched, resolve_single, known,
                      bare_fsync(directory / "fsync.bin", single_count),
                      bare_fsync(directory / "fsync.bin", single_count, os.fdatasync))


def bare_fsync(path: Path, count: int, sync: Callable[[int], None] = os.fsync) -> float:
    """Seconds per ``pwrite`` of 4 KiB + ``sync`` (``os.fsync`` or ``os.fdatasync``, which SQLite calls: one per
    commit) of a file in ``path``'s directory, at offsets going round a preallocated MiB (as SQLite writes its WAL
    again from its start after a checkpoint)."""
    block = os.urandom(4 * KIB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.pwrite(fd, bytes(MIB), 0)
        os.fsync(fd)
        began = time.perf_counter()
        for n in range(count):
            os.pwrite(fd, block, (n * 4 * KIB) % MIB)
            sync(fd)
        return (time.perf_counter() - began) / count
    finally:
        os.close(fd)
        path.unlink()
