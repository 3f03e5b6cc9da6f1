"""Helpers of the archive tests: FITS and plain files made on disk, the options of a test ingest, what a test
archive holds, and how to build its action. The Spark fixtures (a session, a standalone cluster) are in
``tests/spark/conftest.py``; these helpers serve the tests that need no JVM too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataq.record import Record
from dataq.store import QueueStore
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


def astropy_sample(name: str, directory: Path) -> Path:
    """A copy of one of the FITS files astropy ships as its own test data (the archive reads files, and astropy's
    installation must stay as it is)."""
    from astropy.io import fits

    directory.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(Path(os.path.dirname(fits.__file__)) / "tests" / "data" / name, directory / name))


def archived_copy(archive_root: Path, checksum: str) -> Path:
    return archive_root / checksum[0:2] / checksum[2:4] / checksum


def leftovers(archive_root: Path) -> list[Path]:
    """Temporary copies an ingest left in the content-addressed store."""
    from dataq.actions.archive.job import TEMP_SUFFIX

    return list(archive_root.rglob(f"*{TEMP_SUFFIX}"))


@dataclass
class Archive:
    """A test archive: its root, its catalog and how to build started actions on it."""

    root: Path
    tmp: Path
    redis_url: str

    @property
    def catalog(self) -> Path:
        return self.root / "catalog"

    def config(self, queue: Mapping[str, Any] | None = None, **options: Any) -> Path:
        return write_config(self.tmp, self.redis_url, actions=["archive_ingest"],
                            options={"archive_ingest": options_for(self.root, **options)},
                            pop={"concurrency": 64}, queue=queue)

    @contextlib.asynccontextmanager
    async def action(self, queue: Mapping[str, Any] | None = None, **options: Any) -> AsyncIterator[Any]:
        """A started ``archive_ingest`` with ``options``; ``queue``: settings of its queue."""
        from dataq.actions import ActionContext, load_actions

        settings = load(self.config(queue, **options))
        queue = settings.queue()
        store = QueueStore.open(settings, self.redis_url, queue.name)
        try:
            (action,) = load_actions(ActionContext(queue, settings.pop.concurrency, store), settings.source)
            await action.start()
            try:
                yield action
            finally:
                await action.close()
        finally:
            await store.close()


@dataclass
class StandaloneCluster:
    """A Spark master and one worker from the pyspark installation, bound to loopback, as child processes."""

    url: str
    work_dir: Path
    processes: list[subprocess.Popen[bytes]]


def spark_class() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    # Tests only: the daemons announce readiness in their logs, and there is nothing else to wait on.
    deadline = time.monotonic() + CLUSTER_START_TIMEOUT
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{log.name}: no {text!r} (exit {process.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
