"""Fixtures shared by every test tier: real redis-servers that dataq starts itself (never the system one), a
store on them, and (as plugins) the push daemons, CLI runners and certificates of the support modules.

With ``CI`` set, a skipped test fails the run: what a test needs, the Makefile installs, so a skip means a part
was not tested. Only a skip for another operating system (:func:`skip_on_other_os`) is let through.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis
import structlog

# No test reads the settings of the machine it runs on ($DATAQ_CONFIG, /etc/dataq/dataq.toml): set and empty, the
# variable means built-in settings wherever a test names no file. Its child processes inherit it.
os.environ["DATAQ_CONFIG"] = ""

from dataq.embedded.redis_server import EmbeddedRedis
from dataq.logs import HANDLER_NAME_PREFIX
from dataq.store import QueueStore

pytest_plugins = [
    "tests.push_support", "tests.cli_support", "tests.replica_support", "tests.sentinel_support",
    "tests.systemd_support", "tests.feed_support", "tests.cluster_support", "tests.mail_support",
]


def printable(logger: object, method: str, line: str) -> str:
    """A path that is not UTF-8 is logged with its undecodable bytes as surrogates, which a terminal's stderr
    escapes (as dataq's own console logging relies on) but pytest-xdist cannot send from a worker: escaped here."""
    return line.encode("utf-8", "backslashreplace").decode("utf-8")


def log_into_the_tests_capture() -> None:
    """structlog's events, rendered for people, handed to the stdlib logger of their module: pytest captures
    those test by test (shown with a failing test's report, readable with ``caplog``), and drops what is logged
    between two tests (a connection closing late, a daemon's last words), so nothing reaches pytest's own output
    or the output of a command a test runs in process. The level is pytest.ini's ``log_level``."""
    structlog.reset_defaults()
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.TimeStamper(fmt="%H:%M:%S.%f"),
            structlog.dev.ConsoleRenderer(colors=False),
            printable,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


log_into_the_tests_capture()
# Without a handler of its own, the root logger would print warnings logged outside any test to stderr.
logging.getLogger().addHandler(logging.NullHandler())
ROOT_LOG_LEVEL = logging.getLogger().level


@pytest.fixture(autouse=True)
def _logging_of_each_test() -> Iterator[None]:
    """Whatever a test configured (a command run in process configures dataq's logging) ends with it."""
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if (h.get_name() or "").startswith(HANDLER_NAME_PREFIX)]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(ROOT_LOG_LEVEL)
    log_into_the_tests_capture()


XDIST_GROUPS = {
    # Tests that run on one worker, one after another (``make test`` runs the suite in parallel, --dist loadgroup;
    # the biggest groups start first):
    "tests/spark/": "spark",  # one JVM for the Spark tests (one SparkContext at a time per process)
    "tests/e2e/test_systemd.py": "systemd",  # one virtualenv for the containers, and one boot at a time
    "tests/e2e/test_systemd_boot.py": "systemd",
    # Modules whose tests share a module-scoped topology: set up once, not once per worker.
    "tests/integration/test_cluster.py": "redis-cluster",
    "tests/integration/test_push_fuzz.py": "push-fuzz",
    "tests/unit/test_parallel_groups.py::test_probe": "parallel-groups-probe",  # checks that groups work
}


def xdist_group(nodeid: str) -> str | None:
    return next((name for prefix, name in XDIST_GROUPS.items() if nodeid.startswith(prefix)), None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``, the groups of :data:`XDIST_GROUPS`. pytest-xdist's own groups come from
    ``xdist_group`` marks, which it records by renaming each test's node id, and pytest 9 no longer takes that
    rename: a scheduler that groups by the node id's path serves instead."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class PathGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid) or nodeid

    return PathGroups(config, log)


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
