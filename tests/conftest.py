"""Fixtures shared by every test tier: real redis-servers that dataq starts itself (never the system one), a
store on them, and (as plugins) the push daemons, CLI runners and certificates of the support modules.

With ``CI`` set, a skipped test fails the run: what a test needs, the Makefile installs, so a skip means a part
was not tested. Only a skip for another operating system (:func:`skip_on_other_os`) is let through.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

# No test reads the settings of the machine it runs on ($DATAQ_CONFIG, /etc/dataq/dataq.toml): set and empty, the
# variable means built-in settings wherever a test names no file. Its child processes inherit it.
os.environ["DATAQ_CONFIG"] = ""

from dataq.embedded.redis_server import EmbeddedRedis
from dataq.store import QueueStore

pytest_plugins = [
    "tests.push_support", "tests.cli_support", "tests.replica_support", "tests.sentinel_support",
    "tests.systemd_support", "tests.feed_support", "tests.cluster_support",
]

OTHER_OS = "another operating system: "
"""Starts the reason of the one kind of skip that CI accepts."""

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


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[QueueStore]:
    """A store on the test Redis (flushed for each test), queue ``transfer``."""
    queue_store = QueueStore.from_url(redis_url, "transfer")
    yield queue_store
    await queue_store.close()


def skip_on_other_os(reason: str) -> pytest.MarkDecorator:
    """Skip unless on Linux: the one skip CI lets through (``reason`` says what Linux has that others lack)."""
    import sys

    return pytest.mark.skipif(not sys.platform.startswith("linux"), reason=OTHER_OS + reason)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not os.environ.get("CI"):
        return
    skipped = [report for report in terminalreporter.stats.get("skipped", []) if not _other_os(report)]
    if skipped:
        terminalreporter.write_line(f"CI: {len(skipped)} test(s) skipped; a skip in CI is a failure (see -rs above)",
                                    red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not os.environ.get("CI") or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = [] if reporter is None else [r for r in reporter.stats.get("skipped", []) if not _other_os(r)]
    if skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _other_os(report: Any) -> bool:
    longrepr = getattr(report, "longrepr", None)
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(reason).startswith(("Skipped: " + OTHER_OS, OTHER_OS))
