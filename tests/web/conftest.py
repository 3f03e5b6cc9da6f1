"""A web console on a real Redis: the app served by aiohttp's test server, one store per queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dataq.config import load_settings
from dataq.store import QueueStore
from dataq.web.console import Console
from dataq.web.server import make_app

TOKEN = "operator-token-0123456789"
QUEUES = ("transfer", "ingest")
WORKER = "host-1:4242:pop:abc123"


@dataclass
class Web:
    client: TestClient
    stores: dict[str, QueueStore]

    @property
    def transfer(self) -> QueueStore:
        return self.stores["transfer"]


async def serve(redis_url: str, token: str) -> tuple[TestClient, dict[str, QueueStore]]:
    settings = load_settings(environ={})
    stores = {name: QueueStore.from_url(redis_url, name) for name in QUEUES}
    client = TestClient(TestServer(make_app(Console(settings, stores), token)))
    await client.start_server()
    return client, stores


@pytest.fixture
async def web(redis_url: str) -> AsyncIterator[Web]:
    """The console with the operator token :data:`TOKEN`."""
    client, stores = await serve(redis_url, TOKEN)
    yield Web(client, stores)
    await client.close()
    for store in stores.values():
        await store.close()


@pytest.fixture
async def read_only(redis_url: str) -> AsyncIterator[Web]:
    """The console without a token."""
    client, stores = await serve(redis_url, "")
    yield Web(client, stores)
    await client.close()
    for store in stores.values():
        await store.close()
