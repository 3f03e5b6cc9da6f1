"""Helpers for the store-and-forward feeder's tests: an in-process watcher with its spool, files written the ways
instruments write them, and what the queue holds."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dataq.feed.client import Target
from dataq.feed.spool_status import SpoolStatus, read_spool_status
from dataq.feed.spooled import Link, watch_and_forward
from dataq.feed.watch import WatchOptions
from dataq.store import QueueList, QueueStore
from testbed.waits import eventually
from tests.push_support import WAIT_TIMEOUT

FAST = {"settle": 0.2}
"""A start scan that waits 0.2 s for files to settle (the tests write them before)."""


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def write_file(path: Path, data: bytes) -> str:
    """Write ``data`` at ``path`` in one go (created, written, closed); its md5."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return md5(data)


@dataclass
class RunningFeeder:
    """A watcher feeding ``root`` through ``spool`` as a task of the test's loop."""

    root: Path
    spool: Path
    stop: asyncio.Event
    task: asyncio.Task[int]
    options: WatchOptions = field(repr=False, default=None)  # type: ignore[assignment]
    watching: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the directory is watched (a file closed from then on is fed)."""

    async def shutdown(self) -> int:
        self.stop.set()
        return await asyncio.wait_for(self.task, WAIT_TIMEOUT)

    def status(self) -> SpoolStatus:
        return read_spool_status(str(self.spool))


StartFeeder = Callable[..., Any]


@pytest.fixture
async def feeder(tmp_path: Path) -> AsyncIterator[StartFeeder]:
    """``await feeder(targets, root=..., spool=..., **watch options)``: a watcher task, watching its directory
    when it is returned (or ended already: a watch that failed), stopped at teardown."""
    running: list[RunningFeeder] = []

    async def start(targets: list[Target], *, root: Path | None = None, spool: Path | None = None,
                    window: int = 100, timeout: float = 2.0, failback_after: float = 60.0,
                    grace: float = 5.0, tls: ssl.SSLContext | None = None, **watch: Any) -> RunningFeeder:
        root = root or tmp_path / "incoming"
        root.mkdir(parents=True, exist_ok=True)
        spool = spool or tmp_path / "spool"
        options = WatchOptions(root=str(root), **{**FAST, **watch})
        link = Link(tuple(targets), window=window, timeout=timeout, failback_after=failback_after, tls=tls)
        stop, watching = asyncio.Event(), asyncio.Event()

        async def watched() -> None:
            watching.set()

        task = asyncio.create_task(watch_and_forward(options, str(spool), link, stop, grace=grace,
                                                     on_watching=watched))
        fed = RunningFeeder(root, spool, stop, task, options, watching)
        running.append(fed)
        waiting = asyncio.create_task(watching.wait())
        await asyncio.wait({waiting, task}, timeout=WAIT_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        return fed

    yield start
    for fed in running:
        if not fed.task.done():
            fed.stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(fed.task, WAIT_TIMEOUT)


async def queued(store: QueueStore) -> dict[str, str]:
    """id -> path of every record in the active queue."""
    return {record.checksum: record.path for record in await store.list_records(QueueList.ACTIVE)}


async def until_queued(store: QueueStore, count: int, timeout: float = WAIT_TIMEOUT) -> dict[str, str]:
    """Wait until the active queue holds ``count`` records; they, as id -> path."""
    async def enough() -> bool:
        return len(await queued(store)) >= count

    await eventually(enough, timeout)
    return await queued(store)


async def until_spool_empty(fed: RunningFeeder, timeout: float = WAIT_TIMEOUT) -> None:
    async def empty() -> bool:
        return fed.spool.joinpath("spool.sqlite").exists() and fed.status().pending == 0

    await eventually(empty, timeout)


def listed_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.is_file())


