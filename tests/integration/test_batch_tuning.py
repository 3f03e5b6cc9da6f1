"""``network_move`` sizes its batches to the link: over the testbed's long link (a real rsync daemon behind
:class:`testbed.link.Link`) its calls are mostly round trips, and its batches grow, saying why; on loopback they
stay as they are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataq.actions.network_move import NetworkMoveAction
from dataq.actions.registry import load_actions
from dataq.config import QueueSettings
from dataq.ops.documents import TUNING_KEY
from testbed.actions import action_context
from testbed.link import LOOPBACK, Link
from testbed.rsync import RsyncDaemon
from tests.actions_support import make_file

DELAY = 0.03
"""One way, seconds: an rsync call then takes about 0.4 s of round trips."""


@pytest.fixture
async def long_link(daemon: RsyncDaemon) -> AsyncIterator[int]:
    link = Link((LOOPBACK, daemon.port), delay=DELAY)
    port = await link.start()
    yield port
    await link.stop()


def make_action(destination: str, **options: object) -> NetworkMoveAction:
    queue = QueueSettings("transfer", actions=("network_move",), action_options={"network_move": {
        "destination": destination, "batch_size": 10, "max_batch_size": 200, **options}})
    (action,) = load_actions(action_context(queue))
    assert isinstance(action, NetworkMoveAction)
    return action


async def move_all(action: NetworkMoveAction, source: Path, count: int) -> None:
    records = [make_file(source, f"f{n:04d}.fits", b"flat field %d " % n * 100) for n in range(count)]
    await action.start()
    try:
        await asyncio.gather(*(action.run(record) for record in records))
    finally:
        await action.close()


async def test_over_a_long_link_batches_grow_and_the_workers_view_says_why(long_link: int, tmp_path: Path) -> None:
    destination = f"rsync://{LOOPBACK}:{long_link}/valley/incoming"
    action = make_action(destination)
    await move_all(action, tmp_path / "mountain", 200)
    tuning = action.status()[TUNING_KEY]
    assert isinstance(tuning, dict)
    state = tuning[destination]
    assert state["batch_size"] > 10
    assert "on round trips and set-up" in str(state["decision"]) and "larger batches" in str(state["decision"])
    assert 0 < state["overhead_seconds"] < 5
    assert action.records_at_once() == 5 * state["batch_size"], \
        "the pop daemon runs enough to fill them, and the next batch, which gathers while they are sent"


async def test_batches_keep_their_size_when_the_operator_says_so(long_link: int, tmp_path: Path) -> None:
    action = make_action(f"rsync://{LOOPBACK}:{long_link}/valley/incoming", max_batch_size=10)
    await move_all(action, tmp_path / "mountain", 80)
    assert TUNING_KEY not in action.status()
    assert action.records_at_once() == 50


async def test_files_larger_than_a_batch_holds_add_one_record_to_claim_not_a_batch(daemon: RsyncDaemon,
                                                                                     tmp_path: Path) -> None:
    action = make_action(daemon.url("valley", "incoming"), batch_bytes=1000)  # each file is a batch of its own
    assert action.records_at_once() == 40, "before any call the files' sizes are unknown: the batches in flight"
    await move_all(action, tmp_path / "mountain", 12)
    assert action.records_at_once() == 41, "a record gathers, not ten that would wait their turn, time running"
