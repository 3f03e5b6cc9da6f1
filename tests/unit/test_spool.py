"""The feeder's spool: a real SQLite database in a temporary directory, as the feeder uses it."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from dataq.errors import SpoolBusy, SpoolCorrupt, SpoolError, SpoolFull
from dataq.feed.spool import DATABASE, Entry, FileKey, Spool, spool_error
from dataq.feed.spool_status import held_by, read_spool_status, retry_refused


def entry(n: int, *, local: bool = False) -> Entry:
    path = f"/data/f{n}"
    checksum = f"{n:032x}"
    return Entry(f"{path} {checksum} {n}\n".encode(), checksum, path,
                 FileKey(path, n, 1000 + n, 50 + n) if local else None)


async def opened(directory: Path) -> Spool:
    return await Spool(str(directory)).open()


async def test_records_are_pending_in_the_order_taken_in_until_answered(tmp_path: Path) -> None:
    spool = await opened(tmp_path / "s")
    try:
        await spool.add([entry(n) for n in range(5)])
        pending = await spool.pending(0, 10)
        assert [row.path for row in pending] == [f"/data/f{n}" for n in range(5)]
        assert pending[0].line == b"/data/f0 " + b"0" * 32 + b" 0\n"
        assert [row.path for row in await spool.pending(pending[1].seq, 2)] == ["/data/f2", "/data/f3"]
        await spool.resolve([pending[0].seq, pending[1].seq], [(pending[2].seq, "path refused")])
        assert [row.path for row in await spool.pending(0, 10)] == ["/data/f3", "/data/f4"]
        status = read_spool_status(spool.directory)
        assert (status.pending, status.refused) == (2, 1)
        assert status.recent_refusals[0].reason == "path refused" and status.recent_refusals[0].path == "/data/f2"
        assert status.notes["answered"] == 2 and status.notes["last_success"] > 0
    finally:
        await spool.close()


async def test_answers_resolved_twice_are_counted_once(tmp_path: Path) -> None:
    """A resolution cancelled while its transaction ran is retried by the forwarder: the records are gone by
    then, and --status must not count them as answered twice."""
    spool = await opened(tmp_path / "s")
    try:
        await spool.add([entry(n) for n in range(3)])
        seqs = [row.seq for row in await spool.pending(0, 10)]
        await spool.resolve(seqs, [])
        await spool.resolve(seqs, [])
        assert read_spool_status(spool.directory).notes["answered"] == 3
    finally:
        await spool.close()


async def test_what_was_taken_in_survives_a_reopen(tmp_path: Path) -> None:
    spool = await opened(tmp_path / "s")
    await spool.add([entry(1, local=True)])
    await spool.close()
    again = await opened(tmp_path / "s")
    try:
        (row,) = await again.pending(0, 10)
        assert row.local and row.path == "/data/f1"
        assert again.known_here(FileKey("/data/f1", 1, 1001, 51))
        assert not again.known_here(FileKey("/data/f1", 1, 9999, 51))  # another version of the file
    finally:
        await again.close()


async def test_files_no_longer_listed_are_forgotten(tmp_path: Path) -> None:
    spool = await opened(tmp_path / "s")
    try:
        await spool.add([entry(n, local=True) for n in range(3)])
        assert await spool.forget_files_except("/data", ["/data/f1"]) == 2
        assert await spool.forget_files_except("/elsewhere", []) == 0
        assert read_spool_status(spool.directory).files_known == 1
    finally:
        await spool.close()


async def test_a_second_feeder_on_the_same_spool_is_refused_naming_the_first(tmp_path: Path) -> None:
    spool = await opened(tmp_path / "s")
    try:
        with pytest.raises(SpoolBusy, match=rf"in use by another feeder \(pid {os.getpid()}\)"):
            await opened(tmp_path / "s")
        assert held_by(str(tmp_path / "s")) == os.getpid()
    finally:
        await spool.close()
    assert held_by(str(tmp_path / "s")) is None


async def test_a_damaged_spool_file_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    directory.mkdir()
    (directory / DATABASE).write_bytes(os.urandom(8192))
    with pytest.raises(SpoolCorrupt, match=rf"the spool {directory / DATABASE} is damaged .*move its directory aside"):
        await opened(directory)
    with pytest.raises(SpoolCorrupt, match=str(directory / DATABASE)):
        read_spool_status(str(directory))


async def test_another_sqlite_database_is_not_taken_for_a_spool(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    directory.mkdir()
    with sqlite3.connect(directory / DATABASE) as other:
        other.execute("CREATE TABLE accounts (id)")
    with pytest.raises(SpoolCorrupt, match="not a dataq spool"):
        await opened(directory)
    with pytest.raises(SpoolCorrupt, match="not a dataq spool"):
        read_spool_status(str(directory))


def test_a_spool_whose_feeder_is_creating_it_reads_as_empty_not_as_a_foreign_database(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    directory.mkdir()
    sqlite3.connect(directory / DATABASE).close()  # the file exists; its tables come a moment later
    status = read_spool_status(str(directory))
    assert (status.pending, status.refused, status.files_known) == (0, 0, 0)
    assert retry_refused(str(directory)) == 0


async def test_status_and_retry_work_beside_a_running_feeder(tmp_path: Path) -> None:
    spool = await opened(tmp_path / "s")
    try:
        await spool.add([entry(n) for n in range(3)])
        rows = await spool.pending(0, 10)
        await spool.resolve([], [(rows[0].seq, "no"), (rows[1].seq, "no")])
        status = read_spool_status(str(tmp_path / "s"))
        assert (status.pending, status.refused, status.held_by) == (1, 2, os.getpid())
        assert retry_refused(str(tmp_path / "s")) == 2
        again = await spool.pending(rows[2].seq, 10)  # new rows: a feeder past them sends them too
        assert [row.path for row in again] == ["/data/f0", "/data/f1"]
    finally:
        await spool.close()


def test_status_of_a_directory_without_a_spool_says_so(tmp_path: Path) -> None:
    with pytest.raises(SpoolError, match=rf"no spool in {tmp_path}"):
        read_spool_status(str(tmp_path))


def test_a_full_disk_is_named_as_such() -> None:
    assert isinstance(spool_error("/s/spool.sqlite", OSError(errno.ENOSPC, "No space left on device")), SpoolFull)
    full = sqlite3.OperationalError("database or disk is full")
    assert isinstance(spool_error("/s/spool.sqlite", full), SpoolFull)
    assert "the spool /s/spool.sqlite cannot grow" in str(spool_error("/s/spool.sqlite", full))
