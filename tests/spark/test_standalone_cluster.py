"""The same ingest on a Spark standalone cluster (a master and a worker on loopback): only the master URL changes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
pytest.importorskip("astropy", reason="astropy is not installed (pip install 'dataq[spark]')")

from dataq.actions.archive import catalog
from dataq.errors import ActionError
from dataq.record import Record
from tests.archive_support import (
    Archive,
    StandaloneCluster,
    archived_copy,
    md5,
    write_fits,
    write_plain,
)

pytestmark = pytest.mark.spark

CLUSTER_CONF = ["spark.executor.memory=512m", "spark.executor.cores=2", "spark.cores.max=2"]


@pytest.mark.timeout(300)
async def test_an_ingest_through_a_standalone_master_runs_on_its_worker(
        standalone_cluster: StandaloneCluster, archive: Archive) -> None:
    records = [write_fits(archive.tmp / "src" / f"obs{n}.fits", {"INSTRUME": "decam", "DATE-OBS": "2014-07-08",
                                                                  "EXPTIME": 90.0}, seed=n) for n in range(3)]
    records += [write_plain(archive.tmp / "src" / f"f{n}.dat", os.urandom(3000)) for n in range(3)]
    liar = Record(path=records[-1].path, checksum=md5(b"other"), size=records[-1].size)
    async with archive.action(master=standalone_cluster.url, conf=CLUSTER_CONF, batch_size=7) as action:
        outcomes = await asyncio.gather(*(action.run(r) for r in [*records, liar]), return_exceptions=True)
        spark: Any = action._job.spark  # the session the action started for this master
        assert spark.sparkContext.master == standalone_cluster.url
        rows = catalog.list_rows(spark, str(archive.catalog))

    assert outcomes[:-1] == [None] * len(records)
    assert isinstance(outcomes[-1], ActionError) and "checksum mismatch" in str(outcomes[-1])
    assert sorted(row["checksum"] for row in rows) == sorted(r.checksum for r in records)
    assert {row["instrument"] for row in rows if row["is_fits"]} == {"decam"}
    for record in records:
        assert archived_copy(archive.root, record.checksum).read_bytes() == Path(record.path).read_bytes()
    # The executors ran in the worker's application directory, not in this process's local mode.
    (application,) = standalone_cluster.work_dir.iterdir()
    assert application.name.startswith("app-") and any(application.iterdir())
