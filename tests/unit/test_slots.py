"""The room of a destination's calls at once (``actions/slots.py``): first come first served, resized while calls
run, and the records waiting named for the heartbeat."""

from __future__ import annotations

import asyncio

import pytest

from dataq.actions.slots import Slots
from dataq.ops.documents import WAITING_KEY


async def test_calls_beyond_the_room_wait_in_order_and_are_named_until_they_enter() -> None:
    slots = Slots("/store", 1)
    entered: list[str] = []

    async def call(name: str) -> None:
        await slots.enter([name])
        entered.append(name)

    await slots.enter(["first"])
    waiting = [asyncio.create_task(call(name)) for name in ("b", "c", "d")]
    await asyncio.sleep(0)
    assert slots.status(1) == {WAITING_KEY: {"/store": {"max_connections": 1, "open": 1, "ids": ["b", "c", "d"]}}}
    slots.leave()
    await asyncio.sleep(0)
    assert entered == ["b"]
    slots.room = 3  # a reload raising max_connections lets the others in at once
    await asyncio.gather(*waiting)
    assert entered == ["b", "c", "d"] and slots.open == 3
    assert slots.status(3) == {}


async def test_a_waiting_call_cancelled_leaves_its_turn_to_the_next() -> None:
    slots = Slots("/store", 1)
    await slots.enter()
    gone = asyncio.create_task(slots.enter(["gone"]))
    kept = asyncio.create_task(slots.enter(["kept"]))
    await asyncio.sleep(0)
    slots.leave()  # wakes "gone", which is cancelled before it runs
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    await asyncio.wait_for(kept, 1.0)
    assert slots.open == 1
