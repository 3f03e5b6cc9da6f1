"""The store's lane: its scripts run on connections it keeps, and a connection whose state is unknown is never
used again."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions as rexc

from dataq.store import QueueStore
from dataq.store.lane import Lane
from tests.helpers import make_records


async def test_calls_one_after_another_share_one_connection(store: QueueStore) -> None:
    lane = Lane(store.client)
    ids = {await lane.execute("CLIENT", "ID") for _ in range(20)}
    assert len(ids) == 1
    await lane.close()


async def test_calls_at_the_same_time_each_get_a_connection_and_keep_it(store: QueueStore) -> None:
    lane = Lane(store.client)
    first = await asyncio.gather(*(lane.execute("CLIENT", "ID") for _ in range(3)))
    again = await asyncio.gather(*(lane.execute("CLIENT", "ID") for _ in range(3)))
    assert len(set(first)) == 3 and set(again) == set(first)
    await lane.close()


async def test_an_error_reply_is_raised_and_the_connection_stays_in_use(store: QueueStore) -> None:
    lane = Lane(store.client)
    before = await lane.execute("CLIENT", "ID")
    with pytest.raises(rexc.NoScriptError):
        await lane.execute("EVALSHA", "0" * 40, 0)
    assert await lane.execute("CLIENT", "ID") == before
    await lane.close()


async def test_a_call_cancelled_before_its_reply_leaves_no_stale_reply_behind(store: QueueStore) -> None:
    lane = Lane(store.client)
    blocked = asyncio.create_task(lane.execute("BLPOP", "nothing-comes", 5))
    await asyncio.sleep(0.1)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    await store.r.lpush("nothing-comes", "late")  # the BLPOP's reply would have been this
    await asyncio.sleep(0.05)
    assert await lane.execute("ECHO", "mine") == "mine"
    assert await store.r.llen("nothing-comes") == 1  # the cancelled BLPOP's connection was closed: it took nothing
    await lane.close()


async def test_a_connection_killed_by_the_server_fails_one_call_and_the_next_reconnects(store: QueueStore) -> None:
    lane = Lane(store.client)
    victim = await lane.execute("CLIENT", "ID")
    await store.r.execute_command("CLIENT", "KILL", "ID", victim)
    with pytest.raises(rexc.ConnectionError):
        await lane.execute("PING")
    assert await lane.execute("CLIENT", "ID") != victim
    await lane.close()


async def test_scripts_are_loaded_again_into_a_server_that_forgot_them(store: QueueStore) -> None:
    await store.push_batch(make_records(1), "test")
    await store.r.script_flush()
    result = await store.push_batch(make_records(2, start=1), "test")
    assert result.pushed == [True, True] and result.active_length == 3
