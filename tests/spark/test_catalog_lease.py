"""The store's lease renewal, which keeps the archive catalog's single writer while a long append runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from dataq.store import QueueStore

pytestmark = pytest.mark.spark  # part of the archive_ingest suite; needs only Redis

LEASE = "archive-catalog"


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[QueueStore]:
    store = QueueStore.from_url(redis_url, "ingest")
    yield store
    await store.close()


async def ttl_ms(store: QueueStore) -> int:
    return int(await store.r.pttl(store.keys.lock(LEASE)))


async def test_the_holder_renews_its_lease_to_a_new_ttl(store: QueueStore) -> None:
    assert await store.acquire_lease(LEASE, "mine", 1.0)
    assert await store.renew_lease(LEASE, "mine", 30.0)
    assert 29_000 < await ttl_ms(store) <= 30_000


async def test_another_token_cannot_renew_the_lease_nor_change_its_ttl(store: QueueStore) -> None:
    assert await store.acquire_lease(LEASE, "mine", 5.0)
    assert not await store.renew_lease(LEASE, "theirs", 60.0)
    assert await ttl_ms(store) <= 5_000
    assert await store.r.get(store.keys.lock(LEASE)) == "mine"


async def test_an_expired_lease_is_not_renewed_and_is_free_for_another_writer(store: QueueStore) -> None:
    assert await store.acquire_lease(LEASE, "mine", 0.1)
    await asyncio.sleep(0.3)
    assert not await store.renew_lease(LEASE, "mine", 30.0)
    assert await store.acquire_lease(LEASE, "theirs", 30.0)
    assert not await store.renew_lease(LEASE, "mine", 30.0)
