from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dataq.store import QueueStore


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[QueueStore]:
    """A store on the test Redis (flushed for each test), queue ``transfer``."""
    queue_store = QueueStore.from_url(redis_url, "transfer")
    yield queue_store
    await queue_store.close()
