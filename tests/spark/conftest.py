"""Fixtures of the Spark tests: one local SparkSession per test module, FITS files made with astropy, archive
actions wired to the test Redis, and a Spark standalone master and worker on loopback.

Each test module starts with ``pytest.importorskip("pyspark")``, so without the ``spark`` extra the modules are
skipped with that reason; tests that need a JVM skip when no Java 17+ is found (the tests of that check do not).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dataq.errors import ConfigError
from dataq.record import Record
from dataq.redis_server import free_port
from tests.pop_support import load, write_config

TEST_MASTER = "local[2]"
TEST_CONF = ("spark.sql.shuffle.partitions=2", "spark.driver.memory=1g", "spark.executor.memory=512m")
"""Small: two cores and a modest heap are what the test machine has to spare."""
FAST_BATCH_AGE = 0.2
LOOPBACK = "127.0.0.1"
CLUSTER_START_TIMEOUT = 60.0
CLUSTER_STOP_TIMEOUT = 15.0


def options_for(archive_root: Path, **overrides: Any) -> dict[str, Any]:
    """archive_ingest options matching the module's shared session (same master and conf)."""
    return {"archive_root": str(archive_root), "master": TEST_MASTER, "conf": list(TEST_CONF),
            "batch_age": FAST_BATCH_AGE, **overrides}


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def record_for(path: Path, *, checksum: str | None = None, size: int | None = None) -> Record:
    data = path.read_bytes()
    return Record(path=str(path), checksum=checksum or md5(data), size=len(data) if size is None else size,
                  source="test")


def write_plain(path: Path, data: bytes) -> Record:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return record_for(path)


def write_fits(path: Path, cards: Mapping[str, Any], *, shape: tuple[int, int] = (8, 8), seed: int = 0) -> Record:
    """A FITS file with a primary image and the given header cards, as a telescope would write it."""
    import numpy as np
    from astropy.io import fits

    path.parent.mkdir(parents=True, exist_ok=True)
    hdu = fits.PrimaryHDU(np.full(shape, seed, dtype=np.int16))
    for key, value in cards.items():
        hdu.header[key] = value
    hdu.writeto(path)
    return record_for(path)


def archived_copy(archive_root: Path, checksum: str) -> Path:
    return archive_root / checksum[0:2] / checksum[2:4] / checksum


def leftovers(archive_root: Path) -> list[Path]:
    """Temporary copies an ingest left in the content-addressed store."""
    from dataq.actions.spark_job import TEMP_SUFFIX

    return list(archive_root.rglob(f"*{TEMP_SUFFIX}"))


@pytest.fixture(scope="session")
def java() -> None:
    """Skip unless Spark can run here (the Java check's own tests fake the machine instead)."""
    from dataq.actions.archive_ingest import check_java

    try:
        check_java()
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def spark(java: None) -> Iterator[Any]:
    """The module's SparkSession, held in the pool the actions use, so their start and close reuse it."""
    from dataq.actions.archive_ingest import ArchiveIngestOptions
    from dataq.actions.spark_session import SESSIONS

    spec = ArchiveIngestOptions(archive_root="/", master=TEST_MASTER, conf=TEST_CONF).session_spec()
    session = SESSIONS.acquire(spec)
    yield session
    SESSIONS.release()


@dataclass
class Archive:
    """A test archive: its root, its catalog and how to build started actions on it."""

    root: Path
    tmp: Path
    redis_url: str

    @property
    def catalog(self) -> Path:
        return self.root / "catalog"

    def config(self, **options: Any) -> Path:
        return write_config(self.tmp, self.redis_url, actions=["archive_ingest"],
                            options={"archive_ingest": options_for(self.root, **options)},
                            pop={"concurrency": 64})

    @contextlib.asynccontextmanager
    async def action(self, **options: Any) -> AsyncIterator[Any]:
        from dataq.actions import load_actions

        settings = load(self.config(**options))
        (action,) = load_actions(settings.queue(), settings)
        await action.start()
        try:
            yield action
        finally:
            await action.close()


@pytest.fixture
def archive(tmp_path: Path, redis_url: str) -> Archive:
    return Archive(tmp_path / "archive", tmp_path, redis_url)


# --- a standalone cluster ------------------------------------------------------------------------------------


@dataclass
class StandaloneCluster:
    """A Spark master and one worker from the pyspark installation, bound to loopback, as child processes."""

    url: str
    work_dir: Path
    processes: list[subprocess.Popen[bytes]]


def _spark_class() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    # Tests only: the daemons announce readiness in their logs, and there is nothing else to wait on.
    deadline = time.monotonic() + CLUSTER_START_TIMEOUT
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{log.name}: no {text!r} (exit {process.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


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
                process = subprocess.Popen([_spark_class(), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                           cwd=base)
            processes.append(process)
            _wait_for_line(log, ready[role], process)
        yield StandaloneCluster(url, base / "work", processes)
    finally:
        for process in reversed(processes):  # the worker first: it stops the executors it launched
            process.terminate()
            try:
                process.wait(CLUSTER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
