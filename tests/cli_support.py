"""Shared pieces of the dataq-cli tests: a settings file pointing at the test Redis, and a way to run the CLI.

The CLI runs its own event loop (``asyncio.run``), so the tests that invoke it are plain functions, and they
set up or inspect the queue through :func:`on_store`, which runs one coroutine against a fresh store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from dataq.cli.console import main
from dataq.record import Record
from dataq.store import QueueList, QueueStore
from tests.helpers import make_records

QUEUE = "transfer"
OTHER_QUEUE = "archive"
T = TypeVar("T")


def write_config(directory: Path, redis_url: str) -> Path:
    """A settings file with two queues (``transfer`` first, so the default) on the given Redis."""
    config = directory / "dataq.toml"
    config.write_text(
        f'data_dir = "{directory / "data"}"\n'
        f'[redis]\nurl = "{redis_url}"\n'
        f'[log]\ndir = "{directory / "log"}"\n'
        f"[queues.{QUEUE}]\n[queues.{OTHER_QUEUE}]\npush_port = 9989\n"
    )
    return config


@pytest.fixture
def config(tmp_path: Path, redis_url: str) -> Path:
    return write_config(tmp_path, redis_url)


def cli_with(config: Path) -> Callable[..., Result]:
    """``run(*args, input=None)``: dataq-cli in-process with the settings file ``config``; stdout and stderr
    apart."""

    def run(*args: str, input: str | bytes | None = None) -> Result:
        return CliRunner().invoke(main, ["--config", str(config), *args], input=input)

    return run


@pytest.fixture
def cli(config: Path) -> Callable[..., Result]:
    """``cli(*args, input=None)``: run dataq-cli in-process with the test settings; stdout and stderr apart."""
    return cli_with(config)


def on_store(redis_url: str, work: Callable[[QueueStore], Awaitable[T]], queue: str = QUEUE) -> T:
    """Run ``work(store)`` on a store of ``queue`` and close it."""

    async def run() -> T:
        store = QueueStore.from_url(redis_url, queue)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())


def seed(redis_url: str, count: int, start: int = 0, queue: str = QUEUE) -> list[Record]:
    """Push ``count`` records; the first of them is next to run (last in --list active)."""
    records = make_records(count, start)

    async def push(store: QueueStore) -> None:
        for i in range(0, len(records), 1000):
            await store.push_batch(records[i : i + 1000], source="test")

    on_store(redis_url, push, queue)
    return records


def ids(redis_url: str, which: QueueList, queue: str = QUEUE) -> list[str]:
    """The list's ids in list order (active: next to run last)."""

    async def read(store: QueueStore) -> list[str]:
        return [r.checksum for r in await store.list_records(which)]

    return on_store(redis_url, read, queue)


def listed(records: Sequence[Record]) -> list[str]:
    """How --list prints records in list order."""
    return [f"{r.checksum} : path={r.path}, size={r.size}" for r in records]


def documents(output: str) -> list[dict[str, Any]]:
    """The JSON Lines documents of a --json call, each checked to be one object with a switch."""
    docs = [json.loads(line) for line in output.splitlines()]
    assert all(isinstance(d, dict) and "switch" in d and "queue" in d for d in docs), output
    return docs


def by_switch(output: str) -> dict[str, dict[str, Any]]:
    return {d["switch"]: d for d in documents(output)}
