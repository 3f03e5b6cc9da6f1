"""The time a steady backlog will take, as ``--summary`` says it, against the time it then takes: a real pop
daemon drains records at a steady pace, the queue having been idle before them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from dataq.ops.eta import queue_eta
from dataq.store import QueueStore
from testbed.waits import eventually, eventually_equal
from tests.helpers import make_records
from tests.pop_support import counter, load, pop_daemon, write_config

RECORDS = 3_000
ASKED_AFTER = 21.0
"""Seconds of running before the time is asked: a whole 10-second bucket of the rates ring has run after the one
the work began in (which the rate leaves out then, as it began before the work did)."""


async def test_the_eta_of_a_steady_backlog_is_within_a_quarter_of_the_time_it_takes(
        tmp_path: Path, redis_url: str, store: QueueStore) -> None:
    await store.push_batch(make_records(RECORDS), source="test")
    settings = load(write_config(tmp_path, redis_url, actions=["sleep:0.05"], pop={"concurrency": 4}))
    async with pop_daemon(settings):
        await eventually(lambda: _running(store), what="the daemon to run records")
        await asyncio.sleep(ASKED_AFTER)
        eta = await queue_eta(store, await store.summary(), await store.workers())
        asked = time.monotonic()
        assert eta.seconds is not None, eta.why
        await eventually_equal(lambda: counter(store, "done"), RECORDS, timeout=120.0, what="every record done")
        took = time.monotonic() - asked
    assert abs(eta.seconds - took) <= 0.25 * took, f"said {eta.seconds:.1f} s, took {took:.1f} s"


async def _running(store: QueueStore) -> bool:
    return await counter(store, "done") > 0
