"""``network_move`` sizes its batches to the link: over the testbed's long link (a real rsync daemon behind
:class:`testbed.link.Link`) the daemon's greeting says the link is far and its batches start at the most; over a
nearer one its calls are mostly round trips, and its batches grow, saying why; on loopback they stay as they
are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dataq.actions.network_move import NetworkMoveAction
from dataq.actions.registry import load_actions
from dataq.actions.transfer_tuner import CALL_ROUND_TRIPS, FAR
from dataq.config import QueueSettings
from dataq.ops.documents import TUNING_KEY
from testbed.actions import action_context
from testbed.link import LOOPBACK, Link
from testbed.rsync import RsyncDaemon
from tests.actions_support import make_file

DELAY = 0.03
"""One way, seconds: an rsync call then takes about 0.4 s of round trips."""
NEARER = 0.002
"""One way, seconds: a call's round trips take about 0.06 s, less than the greeting's call of a far link
(:data:`~dataq.actions.transfer_tuner.FAR`), yet most of a call of a few small files."""


@pytest.fixture
async def linked(daemon: RsyncDaemon) -> AsyncIterator[Callable[[float], Awaitable[str]]]:
    """Starts a long link of a one-way delay to the daemon: the destination's URL through it."""
    links: list[Link] = []

    async def start(delay: float) -> str:
        link = Link((LOOPBACK, daemon.port), delay=delay)
        links.append(link)
        return f"rsync://{LOOPBACK}:{await link.start()}/valley/incoming"

    yield start
    for link in links:
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


async def test_over_a_long_link_batches_start_at_the_most_and_the_workers_view_says_why(
        linked: Callable[[float], Awaitable[str]], tmp_path: Path) -> None:
    destination = await linked(DELAY)
    action = make_action(destination)
    await action.start()
    try:
        state = tuning_of(action, destination)
        assert state["batch_size"] == 200
        assert "the destination greeted in" in str(state["decision"])
        assert "so batches start at the most" in str(state["decision"])
        assert state["round_trip_seconds"] >= DELAY
        assert action.records_at_once() == 4 * 100, \
            "before any record's size is known, four batches of 100 at most: large files would only wait"
    finally:
        await action.close()
    await move_all(action, tmp_path / "mountain", 600)
    state = tuning_of(action, destination)
    assert 0 < state["overhead_seconds"] < 5
    assert action.records_at_once() == 5 * state["batch_size"], \
        "the pop daemon runs enough to fill them, and the next batch, which gathers while they are sent"


async def test_over_a_nearer_link_batches_grow_as_their_calls_say(linked: Callable[[float], Awaitable[str]],
                                                                   tmp_path: Path) -> None:
    destination = await linked(NEARER)
    action = make_action(destination)
    await move_all(action, tmp_path / "mountain", 200)
    state = tuning_of(action, destination)
    assert state["batch_size"] > 10
    assert "on round trips and set-up" in str(state["decision"]) and "larger batches" in str(state["decision"])
    assert 0 < state["round_trip_seconds"] * CALL_ROUND_TRIPS < FAR, "the greeting said the link is near"


def tuning_of(action: NetworkMoveAction, destination: str) -> dict[str, Any]:
    tuning = action.status()[TUNING_KEY]
    assert isinstance(tuning, dict)
    state = tuning[destination]
    assert isinstance(state, dict)
    return state


async def test_batches_keep_their_size_when_the_operator_says_so(linked: Callable[[float], Awaitable[str]],
                                                                 tmp_path: Path) -> None:
    action = make_action(await linked(DELAY), max_batch_size=10)
    await move_all(action, tmp_path / "mountain", 80)
    assert TUNING_KEY not in action.status()
    assert action.records_at_once() == 50


async def test_files_larger_than_a_batch_holds_add_one_record_to_claim_not_a_batch(daemon: RsyncDaemon,
                                                                                     tmp_path: Path) -> None:
    action = make_action(daemon.url("valley", "incoming"), batch_bytes=1000)  # each file is a batch of its own
    assert action.records_at_once() == 40, "before any call the files' sizes are unknown: the batches in flight"
    await move_all(action, tmp_path / "mountain", 12)
    assert action.records_at_once() == 5, \
        "a batch holds one such file: one in each batch in flight and one gathering, not ten that would wait"
