"""Fixtures shared by every test tier: real redis-servers that dataq starts itself (never the system one)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

from dataq.redis_server import EmbeddedRedis

TEST_APPENDFSYNC = "always"

MakeRedis = Callable[..., EmbeddedRedis]
"""``make_redis(*, start=True, data_dir=None, **EmbeddedRedis keywords) -> EmbeddedRedis``."""


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """One embedded redis-server for the whole session, on a free loopback port."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), port=0, appendfsync=TEST_APPENDFSYNC)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    """The session server's URL, its data flushed for this test."""
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def make_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MakeRedis]:
    """A factory of private redis-servers (own data directory, free port unless told), all stopped at teardown.

    For tests that kill, restart or break Redis; pass ``start=False`` to get one not yet started, ``data_dir=``
    to choose its directory, and any other ``EmbeddedRedis`` keyword (``port=None`` for a unix socket).
    """
    with ExitStack() as stack:

        def make(*, start: bool = True, data_dir: str | Path | None = None, **kw: Any) -> EmbeddedRedis:
            kw.setdefault("port", 0)
            kw.setdefault("appendfsync", TEST_APPENDFSYNC)
            server = EmbeddedRedis(data_dir or tmp_path_factory.mktemp("private-redis"), **kw)
            # Every server is stopped even if stopping another one fails.
            stack.callback(server.stop)
            if start:
                server.start()
            return server

        yield make
