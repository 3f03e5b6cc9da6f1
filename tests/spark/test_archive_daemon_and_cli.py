"""archive_ingest inside a real pop daemon, and ``dataq archive ls|stats`` reading what it cataloged."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
pytest.importorskip("astropy", reason="astropy is not installed (pip install 'dataq[spark]')")

from dataq.actions.archive import catalog
from dataq.cli.archive import archive as archive_cli
from dataq.record import Record
from dataq.store import QueueStore
from testbed.waits import eventually
from tests.archive_support import TEST_MASTER, Archive, md5, write_fits, write_plain
from tests.pop_support import QUEUE, load, pop_daemon

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]


async def test_a_pop_daemon_ingests_its_queue_in_batches_and_settles_each_record_alone(
        spark: Any, archive: Archive, redis_url: str) -> None:
    good = [write_plain(archive.tmp / "src" / f"f{n:02d}.dat", os.urandom(2000 + n)) for n in range(24)]
    good.append(write_fits(archive.tmp / "src" / "obs.fits", {"INSTRUME": "mosaic3", "DATE-OBS": "2014-07-08"}))
    liar = write_plain(archive.tmp / "src" / "liar.dat", b"not what the record says")
    bad = Record(path=liar.path, checksum=md5(b"something else"), size=liar.size)
    settings = load(archive.config(batch_size=10, batch_age=0.5))
    store = QueueStore.from_url(redis_url, QUEUE)
    try:
        await store.push_batch([*good, bad], source="test")
        async with pop_daemon(settings, concurrency=20):

            async def settled() -> bool:
                summary = await store.summary()
                return summary.active == summary.in_flight == summary.delayed == 0

            await eventually(settled, timeout=60.0, what="every record settled")
        summary = await store.summary()
        assert (summary.inactive, summary.tracked) == (1, 1)  # only the liar is left, deactivated
        state = await store.record_state(bad.checksum)
        assert state is not None and state.last_error is not None
        assert state.last_error.startswith(f"archive_ingest: checksum mismatch: {liar.path} has md5")
    finally:
        await store.close()
    assert sorted(r["checksum"] for r in catalog.list_rows(spark, str(archive.catalog), limit=100)) == \
        sorted(r.checksum for r in good)


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(archive_cli, list(args), catch_exceptions=False)
    return result


async def test_dataq_archive_ls_and_stats_print_the_catalog_as_text_and_json(archive: Archive) -> None:
    observations = [write_fits(archive.tmp / "src" / f"{instrument}.fits", {"INSTRUME": instrument,
                                                                            "DATE-OBS": f"2014-07-0{n + 1}T01:00:00"})
                    for n, instrument in enumerate(("mosaic3", "decam"))]
    log = write_plain(archive.tmp / "src" / "night.log", b"log\n" * 10)
    async with archive.action(batch_size=3) as action:
        for record in [*observations, log]:
            await action.run(record)
    config = str(archive.config())
    common = ["--config", config, "--master", TEST_MASTER]  # the test module's session: same master and conf

    listed = invoke("ls", *common, "--instrument", "decam", "--json")
    assert listed.exit_code == 0, listed.output
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["checksum"], row["instrument"], row["date_obs"]) == (observations[1].checksum, "decam",
                                                                     "2014-07-02T01:00:00")
    by_day = invoke("ls", *common, "--obs-date", "2014-07-01")
    assert by_day.exit_code == 0
    header, *lines = by_day.stdout.splitlines()
    assert header.split() == list(catalog.LS_COLUMNS)
    assert len(lines) == 1 and observations[0].checksum in lines[0] and "mosaic3" in lines[0]
    by_checksum = invoke("ls", *common, "--checksum", log.checksum, "--json")
    assert [json.loads(line)["path"] for line in by_checksum.stdout.splitlines()] == [log.path]
    assert invoke("ls", *common, "--date", "2000-01-01").stdout == "(no rows)\n"

    stats = invoke("stats", *common, "--json")
    assert stats.exit_code == 0
    (day,) = [json.loads(line) for line in stats.stdout.splitlines()]
    assert (day["files"], day["fits_files"], day["bytes"]) == (3, 2, sum(r.size for r in [*observations, log]))
    per_instrument = invoke("stats", *common, "--by-instrument")
    assert [line.split()[1] for line in per_instrument.stdout.splitlines()[1:]] == ["-", "decam", "mosaic3"]


def test_dataq_archive_on_a_queue_without_archive_ingest_is_a_config_error(archive: Archive, tmp_path: Path) -> None:
    config = tmp_path / "plain.toml"
    config.write_text('[queues.transfer]\nactions = ["echo"]\n')
    result = CliRunner().invoke(archive_cli, ["ls", "--config", str(config)])
    assert result.exit_code == 3
    assert "queue 'transfer' has no archive_ingest action; give --catalog" in result.output
