"""Fixtures of the Spark tests, the ones that need a JVM: one local SparkSession per test module, an archive wired
to the test Redis, and a Spark standalone master and worker on loopback. The Makefile installs the Java runtime;
without one the fixtures skip with the reason, and CI fails on that skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dataq.embedded.redis_server import free_port
from dataq.errors import ConfigError
from tests.archive_support import (
    CLUSTER_STOP_TIMEOUT,
    LOOPBACK,
    TEST_CONF,
    TEST_MASTER,
    Archive,
    StandaloneCluster,
    spark_class,
    wait_for_line,
)

SPARK_TIMEOUT = 300
"""Seconds a Spark test may take: the first on a worker starts the JVM, and on a two-core machine loaded by the
suite's other workers that test took over the suite's 120 s."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("tests/spark/"):
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT))


@pytest.fixture(scope="session")
def java() -> None:
    """Skip unless Spark can run here (the Java check's own tests fake the machine instead)."""
    from dataq.actions.archive.ingest import check_java

    try:
        check_java()
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def spark(java: None) -> Iterator[Any]:
    """The module's SparkSession, held in the pool the actions use, so their start and close reuse it."""
    from dataq.actions.archive.ingest import ArchiveIngestOptions
    from dataq.actions.archive.session import SESSIONS

    spec = ArchiveIngestOptions(archive_root="/", master=TEST_MASTER, conf=TEST_CONF).session_spec()
    session = SESSIONS.acquire(spec)
    yield session
    SESSIONS.release()


@pytest.fixture
def archive(tmp_path: Path, redis_url: str) -> Archive:
    return Archive(tmp_path / "archive", tmp_path, redis_url)


# --- a standalone cluster ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def standalone_cluster(java: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    base = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "SPARK_LOG_DIR": str(base), "PYSPARK_PYTHON": sys.executable,
           # The REST submission server would take the fixed port 6066; nothing here submits through it.
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    port = free_port()
    url = f"spark://{LOOPBACK}:{port}"
    commands = {
        "master": ["org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(port),
                   "--webui-port", str(free_port())],
        "worker": ["org.apache.spark.deploy.worker.Worker", url, "--host", LOOPBACK, "--cores", "2",
                   "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(base / "work")],
    }
    ready = {"master": "I have been elected leader", "worker": "Successfully registered with master"}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for role, args in commands.items():
            log = base / f"{role}.log"
            with open(log, "wb") as out:
                process = subprocess.Popen([spark_class(), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                           cwd=base)
            processes.append(process)
            wait_for_line(log, ready[role], process)
        yield StandaloneCluster(url, base / "work", processes)
    finally:
        for process in reversed(processes):  # the worker first: it stops the executors it launched
            process.terminate()
            try:
                process.wait(CLUSTER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
