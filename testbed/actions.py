"""A pop daemon's surroundings for an action run on its own: its context, on a store on fakeredis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import fakeredis

from dataq.actions import Action, ActionContext
from dataq.config import QueueSettings
from dataq.record import Record
from dataq.store import QueueStore


def fake_store(queue: str = "transfer") -> QueueStore:
    """A store on fakeredis (with its Lua scripts), for pure unit tests: no server, nothing to close."""
    return QueueStore(fakeredis.FakeAsyncRedis(decode_responses=True), queue)


def action_context(queue: QueueSettings | None = None, *, concurrency: int = 4,
                   store: QueueStore | None = None, site: str = "", custody: bool = False) -> ActionContext:
    """What a pop daemon gives its actions; by default leases of a store on fakeredis, no custody (``custody``:
    the store's) and no site name (hand-ons then go in the form of before site names)."""
    queue = queue or QueueSettings("transfer")
    store = store or fake_store(queue.name)
    return ActionContext(queue, concurrency, store, custody=store if custody else None, site=site)


async def run_side_by_side(action: Action[Any], records: Sequence[Record]) -> float:
    """Start ``action``, run ``records`` side by side (each raising what it fails with) and close it: the seconds
    the runs took."""
    await action.start()
    try:
        started = time.perf_counter()
        await asyncio.gather(*(action.run(record) for record in records))
        return time.perf_counter() - started
    finally:
        await action.close()
