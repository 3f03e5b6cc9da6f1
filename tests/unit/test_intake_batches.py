"""Intake of watched files: the files of a burst reach the spool in a few transactions, not one per file or two.

A real spool (SQLite in a temporary directory) and real files; the spool counts the transactions it is asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import cast

import pytest

from dataq.errors import SpoolCorrupt
from dataq.feed.file_intake import EXAMINE_STREAM_GAP
from dataq.feed.forward import Forwarder
from dataq.feed.intake import Intake
from dataq.feed.spool import Entry, Spool
from dataq.record import Record


class CountingSpool(Spool):
    """The feeder's spool, noting how many records each transaction holds."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.transactions: list[int] = []

    async def add(self, entries: Sequence[Entry]) -> None:
        self.transactions.append(len(entries))
        await super().add(entries)


class Woken:
    """Stands for the forwarder: intake wakes it after each transaction."""

    def wake(self) -> None:
        pass


async def closed_files(directory: Path, count: int, gap: float) -> AsyncIterator[str]:
    """Write ``count`` files, one every ``gap`` seconds, yielding each path once it is closed (as inotify would)."""
    directory.mkdir(exist_ok=True)
    for n in range(count):
        path = directory / f"frame-{n:03d}.fits"
        path.write_bytes(b"%03d" % n * 100)
        yield str(path)
        await asyncio.sleep(gap)


async def taken_in(tmp_path: Path, count: int, gap: float) -> list[int]:
    spool = await CountingSpool(str(tmp_path / "spool")).open()
    try:
        intake = Intake(spool, cast(Forwarder, Woken()))
        await intake.take_files(closed_files(tmp_path / "incoming", count, gap))
        assert intake.taken == count
        return cast(CountingSpool, spool).transactions
    finally:
        await spool.close()


async def test_files_closed_a_few_milliseconds_apart_share_a_few_transactions(tmp_path: Path) -> None:
    # 40 files 5 ms apart: cut 3 ms after each file (before batches gathered a stream), about one transaction per
    # file or two; gathered while they come closer together than the stream gap, one or two in all. The bound
    # leaves room for a loaded machine whose sleeps overrun the gap now and then.
    assert EXAMINE_STREAM_GAP > 0.005
    transactions = await taken_in(tmp_path, 40, 0.005)
    assert sum(transactions) == 40
    assert len(transactions) <= 8, transactions


async def test_files_that_come_alone_are_each_taken_at_once(tmp_path: Path) -> None:
    transactions = await taken_in(tmp_path, 3, EXAMINE_STREAM_GAP * 15)
    assert transactions == [1, 1, 1]


class FailingSpool(CountingSpool):
    """A spool whose disk fails (not fills) at its second transaction."""

    async def add(self, entries: Sequence[Entry]) -> None:
        if self.transactions:
            raise SpoolCorrupt("the spool is damaged (a test's)")
        await super().add(entries)


async def test_a_spool_failing_under_a_watch_ends_the_intake_with_its_error_and_stops_the_watch(
        tmp_path: Path) -> None:
    closed: list[bool] = []

    async def watch() -> AsyncIterator[str]:
        try:
            async for path in closed_files(tmp_path / "incoming", 10_000, 0.005):
                yield path
        finally:
            closed.append(True)

    spool = await FailingSpool(str(tmp_path / "spool")).open()
    try:
        with pytest.raises(SpoolCorrupt, match="damaged"):  # the error itself, not a group of them
            async with asyncio.timeout(30):
                await Intake(spool, cast(Forwarder, Woken())).take_files(watch())
    finally:
        await spool.close()
    assert closed == [True], "the watcher stopped with the intake"


async def test_a_spool_failing_under_records_ends_their_intake_with_its_error(tmp_path: Path) -> None:
    async def records() -> AsyncIterator[Record]:
        for n in range(5000):
            yield Record(f"/data/{n}.fits", f"{n:032x}", n)
            await asyncio.sleep(0)

    spool = await FailingSpool(str(tmp_path / "spool")).open()
    try:
        with pytest.raises(SpoolCorrupt, match="damaged"):
            async with asyncio.timeout(30):
                await Intake(spool, cast(Forwarder, Woken())).take_records(records())
    finally:
        await spool.close()
