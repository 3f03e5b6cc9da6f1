"""The hashing of an audit's files, begun before the audit asks anything: the files are listed in parts, each part
handed to the worker processes as soon as it is listed, and the audit reads every file's checksum once."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from dataq.audit import sources
from dataq.audit.hashing import Hashing
from dataq.feed.watch import WatchOptions


def write_files(folder: Path, count: int, size: int = 100) -> dict[str, str]:
    """``count`` files of ``size`` bytes under ``folder``: their md5 by path."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for n in range(count):
        data = os.urandom(size)
        path = folder / f"f{n:04d}.fits"
        path.write_bytes(data)
        written[str(path)] = hashlib.md5(data).hexdigest()
    return written


class CountingPool(sources.HashPool):
    """A hash pool that notes how many files each task it is handed holds."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.tasks: list[int] = []

    def submit(self, paths: list[str], algorithm: str, newest_ns: int) -> Future[list[sources.Result]]:
        self.tasks.append(len(paths))
        return super().submit(paths, algorithm, newest_ns)


async def test_files_listed_in_parts_are_each_hashed_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "LISTED_AT_ONCE", 7)  # folders handed on in parts while they are listed
    written = write_files(tmp_path / "night" / "a", 40) | write_files(tmp_path / "night" / "b", 25)
    options = WatchOptions(str(tmp_path / "night"), recursive=True, settle=0)
    with CountingPool(2) as pool:
        hashing = Hashing(pool, [options], "md5")
        hashed = [item async for group in hashing.groups(10, first=3) for item in group]
    assert {item.path: item.checksum for item in hashed} == written
    assert len(hashed) == len(written) == hashing.listed, "each once"
    assert len(pool.tasks) > 2 and sum(pool.tasks) == 65


async def test_a_few_large_files_are_spread_over_every_worker_not_queued_behind_one(tmp_path: Path) -> None:
    written = write_files(tmp_path / "night", 12, size=1 << 20)
    with CountingPool(2) as pool:
        hashing = Hashing(pool, [WatchOptions(str(tmp_path / "night"), settle=0)], "md5")
        hashed = [item async for group in hashing.groups(100) for item in group]
    assert {item.path: item.checksum for item in hashed} == written
    assert max(pool.tasks) <= 3, f"tasks of {pool.tasks}: at most a quarter of those waiting per free place"


async def test_a_folder_that_cannot_be_listed_is_said_and_the_others_are_hashed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = write_files(tmp_path / "night" / "open", 5)
    write_files(tmp_path / "night" / "locked", 5)
    real = os.scandir

    def scandir(path: str) -> Any:
        # Tests run as root, whom no folder's mode stops: the listing fails here instead.
        if path.endswith("/locked"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(sources.os, "scandir", scandir)
    with sources.HashPool(2) as pool:
        hashing = Hashing(pool, [WatchOptions(str(tmp_path / "night"), recursive=True, settle=0)], "md5")
        hashed = [item async for group in hashing.groups(100) for item in group]
    assert {item.path: item.checksum for item in hashed} == written
    assert hashing.unlisted == [(str(tmp_path / "night" / "locked"), "Permission denied")]

