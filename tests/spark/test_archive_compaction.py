"""Compaction of the archive catalog on a real local Spark: few large files in place of many small ones, with
readers and the ingest running beside it, never a row twice or a row missing."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
pytest.importorskip("astropy", reason="astropy is not installed (pip install 'dataq[spark]')")

from dataq.actions.archive import catalog
from dataq.actions.archive.catalog_files import (
    collect_garbage,
    data_files,
    partition_dir,
    partitions,
    pending_outputs,
)
from dataq.actions.archive.compaction import compact
from dataq.actions.archive.ingest import LEASE_NAME
from dataq.cli.archive import archive as archive_cli
from dataq.store import QueueStore
from tests.archive_support import TEST_MASTER, Archive, write_plain
from tests.pop_support import QUEUE

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

DAYS = (dt.date(2026, 11, 24), dt.date(2026, 11, 25))
OBSERVED = dt.datetime(2014, 7, 8, tzinfo=dt.UTC)


def synthetic_rows(first: int, count: int, day: dt.date) -> list[tuple[Any, ...]]:
    """Catalog rows as the ingest appends them, observed in shuffled order (so sorting shows)."""
    rows = []
    for n in range(first, first + count):
        checksum = hashlib.md5(str(n).encode()).hexdigest()
        observed = OBSERVED + dt.timedelta(minutes=(n * 7919) % 1440)  # all on one day
        keywords = (observed.isoformat(), None, None, "mosaic3", "kp4m", "KPNO", f"field{n}", "object", "r",
                    30.0, None, None, None)
        rows.append((checksum, 1000 + n, observed, f"/data/f{n}.fits", f"{checksum[:2]}/{checksum[2:4]}/{checksum}",
                     QUEUE, dt.datetime.now(dt.UTC), True, None, *keywords, 0, observed, "md5", day))
    return rows


def append_batches(spark: Any, path: str, batches: int, size: int, day: dt.date, first: int = 0) -> list[str]:
    checksums = []
    for batch in range(batches):
        rows = synthetic_rows(first + batch * size, size, day)
        catalog.append(spark, path, rows)
        checksums += [row[0] for row in rows]
    return checksums


async def compact_alone(spark: Any, path: str, *, grace: float) -> tuple[list[Any], int]:
    """A compaction with no other writer about: the lease is a lock of this test's own."""
    lock = asyncio.Lock()
    return await compact(spark, path, lambda: lock, grace=grace)


def all_checksums(spark: Any, path: str) -> list[str]:
    return [row["checksum"] for row in catalog.list_rows(spark, path, limit=1_000_000)]


async def test_small_files_become_one_sorted_file_per_partition_with_exactly_the_same_rows(
        spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "catalog")
    checksums = append_batches(spark, path, 8, 25, DAYS[0]) + append_batches(spark, path, 3, 25, DAYS[1], 200)
    small = data_files(path)
    assert len(small) == 11

    done, removed = await compact_alone(spark, path, grace=300)
    assert (len(done), removed) == (2, 0)
    assert [(c.date, len(c.replaced), c.rows) for c in done] == [(DAYS[0].isoformat(), 8, 200),
                                                                 (DAYS[1].isoformat(), 3, 75)]
    assert data_files(path) == {c.output for c in done}
    assert sorted(all_checksums(spark, path)) == sorted(checksums)
    assert all(os.path.exists(f) for f in small)  # kept for the grace period, hidden from every reader
    observed = [row.obs_time for row in spark.read.parquet(done[0].output).select("obs_time").collect()]
    assert observed == sorted(observed) and len(observed) == 200

    assert await compact_alone(spark, path, grace=0) == ([], 11)  # nothing left to merge; the replaced files go
    assert not any(os.path.exists(f) for f in small)
    assert sorted(all_checksums(spark, path)) == sorted(checksums)


async def test_files_written_before_obs_time_existed_are_read_queried_by_date_obs_and_compacted(
        spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.types import StructType

    path = str(tmp_path / "catalog")
    old_columns = [field for field in catalog.SCHEMA.fields
                   if field.name not in ("time_obs", "extensions", "obs_time", "checksum_algorithm")]
    old = [tuple(value for field, value in zip(catalog.SCHEMA.fields, row, strict=True) if field in old_columns)
           for row in synthetic_rows(0, 10, DAYS[0])]
    spark.createDataFrame(old, StructType(old_columns)).coalesce(1).write.partitionBy("ingest_date").parquet(path)
    new = append_batches(spark, path, 1, 10, DAYS[0], first=10)

    rows = catalog.list_rows(spark, path, limit=100)
    assert sum(row["obs_time"] is None for row in rows) == 10 and len(rows) == 20
    on_the_day = catalog.list_rows(spark, path, catalog.Filters(obs_date=dt.date(2014, 7, 8)), limit=100)
    assert len(on_the_day) == 20  # the old rows by DATE-OBS's text, the new by obs_time

    done, _ = await compact_alone(spark, path, grace=0)
    assert len(done) == 1 and len(data_files(path)) == 1
    after = catalog.list_rows(spark, path, limit=100)
    assert sorted(row["checksum"] for row in after) == sorted(row["checksum"] for row in rows)
    assert {row["checksum"] for row in after if row["obs_time"] is not None} == set(new)


async def test_ingest_compaction_and_readers_at_once_never_show_a_row_twice_or_lose_one(
        spark: Any, archive: Archive, redis_url: str) -> None:
    files = [write_plain(archive.tmp / "src" / f"f{n:03d}.dat", os.urandom(256) + bytes([n % 256]))
             for n in range(150)]
    path = str(archive.catalog)
    stop = threading.Event()
    seen: list[int] = []
    problems: list[str] = []

    def read_while_written() -> None:
        last: set[str] = set()
        while True:
            last_read = stop.is_set()  # one more read once everything is written
            listed = all_checksums(spark, path)
            if len(listed) != len(set(listed)):
                problems.append(f"{len(listed) - len(set(listed))} rows twice in one read")
            if not last <= set(listed):
                problems.append(f"{len(last - set(listed))} rows missing after they were seen")
            last = set(listed)
            seen.append(len(listed))
            if last_read:
                return
            stop.wait(0.05)

    async def compact_while_written(store: QueueStore) -> int:
        compactions = 0
        while not stop.is_set():
            # Beside the ingest's own compactions (compact_files=3): one of two that chose the same files publishes.
            done, _ = await compact(spark, path, lambda: store.lease(LEASE_NAME, ttl=30, wait=60), grace=30)
            compactions += len(done)
            await asyncio.sleep(0.2)
        return compactions

    store = QueueStore.from_url(redis_url, QUEUE)
    reader = threading.Thread(target=read_while_written, name="catalog reader")
    try:
        async with archive.action(batch_size=10, batch_age=0.05, compact_files=3, compact_grace=30) as action:
            reader.start()
            compactor = asyncio.create_task(compact_while_written(store))
            for wave in range(0, len(files), 10):
                outcomes = await asyncio.gather(*(action.run(record) for record in files[wave:wave + 10]))
                assert outcomes == [None] * 10
            stop.set()
            compactions = await compactor
        await asyncio.to_thread(reader.join)
    finally:
        stop.set()
        await store.close()
    assert problems == []
    assert compactions >= 1 and len(seen) >= 3 and seen[-1] == len(files)
    before_collection = data_files(path)
    assert collect_garbage(path, grace=0) > 0
    assert data_files(path) == before_collection
    listed = all_checksums(spark, path)
    assert sorted(listed) == sorted(record.checksum for record in files)  # every checksum, once
    assert len(data_files(path)) < len(files) // 10


async def test_two_compactions_of_the_same_files_publish_once(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "catalog")
    checksums = append_batches(spark, path, 6, 10, DAYS[0])
    lock = asyncio.Lock()
    first, second = await asyncio.gather(*(compact(spark, path, lambda: lock, grace=300) for _ in range(2)))
    assert len(first[0]) + len(second[0]) == 1
    assert len(data_files(path)) == 1
    assert sorted(all_checksums(spark, path)) == sorted(checksums)
    assert os.listdir(tmp_path / "catalog" / "_compacting") == []  # the loser's work is gone too


async def test_the_ingest_compacts_its_partition_by_itself_once_it_has_enough_small_files(
        spark: Any, archive: Archive) -> None:
    files = [write_plain(archive.tmp / "src" / f"g{n:02d}.dat", os.urandom(300)) for n in range(20)]
    async with archive.action(batch_size=5, batch_age=0.05, compact_files=4, compact_grace=0) as action:
        for wave in range(0, len(files), 5):
            assert await asyncio.gather(*(action.run(record) for record in files[wave:wave + 5])) == [None] * 5
        await action._upkeep.close(within=60)  # waits for the compaction the last append started
    (day,) = partitions(str(archive.catalog))
    assert len(data_files(str(archive.catalog))) == 1  # four batches' files became one
    assert pending_outputs(partition_dir(str(archive.catalog), day)) != set()  # removed by the next compaction
    assert sorted(all_checksums(spark, str(archive.catalog))) == sorted(record.checksum for record in files)


def compact_cli(*args: str) -> Any:
    return CliRunner().invoke(archive_cli, ["compact", *args], catch_exceptions=False)


def json_lines(output: str) -> Sequence[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines()]


async def test_dataq_archive_compact_rewrites_the_dates_asked_and_lets_go_of_the_lease(
        spark: Any, archive: Archive, redis_url: str) -> None:
    path = str(archive.catalog)
    append_batches(spark, path, 3, 5, DAYS[0])
    append_batches(spark, path, 2, 5, DAYS[1], first=100)
    config = str(archive.config())

    only_first = await asyncio.to_thread(compact_cli, "--config", config, "--master", TEST_MASTER,
                                         "--date", DAYS[0].isoformat(), "--json")
    assert only_first.exit_code == 0, only_first.output
    (done,) = json_lines(only_first.stdout)
    assert (done["ingest_date"], done["files"], done["rows"]) == (DAYS[0].isoformat(), 3, 15)
    assert len(os.listdir(partition_dir(path, DAYS[1].isoformat()))) >= 2

    rest = await asyncio.to_thread(compact_cli, "--config", config, "--master", TEST_MASTER, "--grace", "0")
    assert rest.exit_code == 0, rest.output
    assert rest.stdout.splitlines()[0] == "1 compaction(s); 3 replaced file(s) removed after their grace period"
    assert len(data_files(path)) == 2
    store = QueueStore.from_url(redis_url, QUEUE)
    try:
        async with store.lease(LEASE_NAME, ttl=5, wait=0.5):  # the CLI let go of it
            pass
    finally:
        await store.close()


def test_dataq_archive_compact_without_redis_says_so(archive: Archive, tmp_path: Path) -> None:
    config = write_config_without_redis(archive, tmp_path)
    result = compact_cli("--config", str(config), "--master", TEST_MASTER)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: dataq archive compact holds the queue's catalog lease in Redis "
                                    "(redis://127.0.0.1:1/0), which it cannot reach: "), result.stderr


def write_config_without_redis(archive: Archive, tmp_path: Path) -> Path:
    text = archive.config().read_text().replace(archive.redis_url, "redis://127.0.0.1:1/0")
    path = tmp_path / "no-redis.toml"
    path.write_text(text)
    return path
