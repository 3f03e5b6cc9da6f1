"""Leases on redis-py's Lock: one holder at a time, renewed while held, freed by a dead holder's TTL, and a
lease lost while held is reported, never passed over."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from dataq.errors import LeaseLost
from dataq.store import QueueStore

LEASE = "archive-catalog"


async def test_a_second_holder_waits_for_the_first_and_gives_up_after_its_wait(store: QueueStore) -> None:
    async with store.lease(LEASE, ttl=30, wait=1):
        with pytest.raises(LeaseLost, match=r"stayed with another holder for 0\.2 s"):
            async with store.lease(LEASE, ttl=30, wait=0.2):
                pass
    async with store.lease(LEASE, ttl=30, wait=0.2):  # let go: free at once
        assert await store.r.exists(store.keys.lock(LEASE))
    assert not await store.r.exists(store.keys.lock(LEASE))


async def test_a_holder_keeps_its_lease_by_renewing_it_to_its_ttl(store: QueueStore) -> None:
    key = store.keys.lock(LEASE)
    async with store.lease(LEASE, ttl=0.6, wait=1):
        await store.r.pexpire(key, 60_000)  # as though it had just been taken with a TTL of a minute
        async with asyncio.timeout(10):
            while await store.r.pttl(key) > 600:  # a renewal puts the holder's own TTL back
                await asyncio.sleep(0.02)
        with pytest.raises(LeaseLost):  # still held: nobody else gets it
            async with store.lease(LEASE, ttl=0.6, wait=0):
                pass


async def test_a_dead_holders_lease_is_free_once_its_ttl_runs_out(store: QueueStore) -> None:
    await store.r.set(store.keys.lock(LEASE), "a-holder-that-died", px=200)
    async with store.lease(LEASE, ttl=30, wait=10):
        token = await store.r.get(store.keys.lock(LEASE))
    assert token != "a-holder-that-died"


async def test_a_lease_lost_while_held_is_reported_when_the_holder_lets_go(store: QueueStore) -> None:
    with pytest.raises(LeaseLost, match="was lost while held"):
        async with store.lease(LEASE, ttl=30, wait=1):
            await store.r.delete(store.keys.lock(LEASE))  # as a Redis restarted without it would
            await store.r.set(store.keys.lock(LEASE), "another-writer", px=30_000)
    assert await store.r.get(store.keys.lock(LEASE)) == "another-writer"  # not ours to free


async def test_an_error_inside_lets_the_lease_go_and_is_what_the_caller_sees(store: QueueStore) -> None:
    with contextlib.suppress(ZeroDivisionError):
        async with store.lease(LEASE, ttl=30, wait=1):
            raise ZeroDivisionError
    assert not await store.r.exists(store.keys.lock(LEASE))
