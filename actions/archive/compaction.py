"""Compaction: a partition's many small Parquet files rewritten as few large ones, on Spark.

Each micro-batch appends one small file per partition, and a day of 0.5 s batches makes tens of thousands; every
query then opens them all. One compaction takes a partition's files below ``target_bytes`` (smallest first, up to
that size in all), writes their rows as one file sorted by observation time (so a time range reads few row
groups), checks the row count, and publishes it in place of its inputs (:mod:`.catalog_files` says how readers
never see a row twice or miss one). A partition is compacted until fewer than ``min_files`` small files remain.

The rewrite runs without the catalog lease, so appends go on meanwhile; only the publication (and the removal of
replaced files) holds it, after checking that every input is still there and replaced by no one else: two
compactions that chose the same files (the ingest's own and ``dataq archive compact``) publish once.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from pyspark.sql import SparkSession

from dataq.actions.archive import catalog
from dataq.actions.archive.catalog_files import (
    HIDDEN_PREFIXES,
    PARQUET_SUFFIX,
    PARTITION_COLUMN,
    DataFile,
    collect_garbage,
    new_work_dir,
    partition_dir,
    partition_files,
    partitions,
    pending_outputs,
    publish,
)
from dataq.actions.files import finish_in_thread
from dataq.errors import ActionError

DEFAULT_TARGET_BYTES = 128 << 20
"""A compacted file's size: large enough that a year of nights is a few hundred files, small enough to rewrite."""
DEFAULT_MIN_FILES = 2
SORT_COLUMNS = ("obs_time", "ingested_at", "checksum")

Lease = Callable[[], AbstractAsyncContextManager[None]]
"""The catalog lease, taken anew for each publication."""


class CompactionFailed(ActionError):
    """A compaction's output did not hold exactly its inputs' rows; nothing was published."""


@dataclass(frozen=True, slots=True)
class Compacted:
    """One published compaction."""

    date: str
    output: str
    replaced: tuple[str, ...]
    rows: int
    bytes_before: int
    bytes_after: int


def small_files(catalog_path: str, date: str, target_bytes: int) -> list[DataFile]:
    """The partition's files below ``target_bytes`` that are not outputs still waiting for their inputs'
    removal, smallest first: what compaction merges."""
    found = partition_files(catalog_path, date)
    # Manifests listed after the files: an output published in between has its manifest (written first) seen.
    try:
        pending = pending_outputs(partition_dir(catalog_path, date))
    except FileNotFoundError:
        return []
    return sorted((small for small in found
                   if small.size < target_bytes and os.path.basename(small.path) not in pending),
                  key=lambda small: (small.size, small.path))


def due(catalog_path: str, date: str, target_bytes: int, min_files: int) -> list[DataFile]:
    """The inputs of the partition's next compaction if it has at least ``min_files`` small files and two of them
    fit the target together; else none."""
    small = small_files(catalog_path, date, target_bytes)
    chosen = plan(small, target_bytes) if len(small) >= max(2, min_files) else []
    return chosen if len(chosen) >= 2 else []


def plan(small: list[DataFile], target_bytes: int) -> list[DataFile]:
    """The inputs of one compaction: the ``small`` files (smallest first) while their sum stays within the
    target."""
    chosen: list[DataFile] = []
    total = 0
    for found in small:
        if chosen and total + found.size > target_bytes:
            break
        chosen.append(found)
        total += found.size
    return chosen


async def compact(spark: SparkSession, catalog_path: str, lease: Lease, *, dates: list[str] | None = None,
                  target_bytes: int = DEFAULT_TARGET_BYTES, min_files: int = DEFAULT_MIN_FILES,
                  grace: float) -> tuple[list[Compacted], int]:
    """Remove what earlier compactions replaced more than ``grace`` seconds ago, then compact the partitions of
    ``dates`` (all when None). Returns the compactions published and the number of replaced files removed."""
    async with lease():
        removed = await finish_in_thread(collect_garbage, catalog_path, grace)
    done: list[Compacted] = []
    for date in await asyncio.to_thread(partitions, catalog_path) if dates is None else dates:
        while inputs := await asyncio.to_thread(due, catalog_path, date, target_bytes, min_files):
            compacted = await _compact(spark, catalog_path, date, inputs, lease)
            if compacted is None:  # another compaction took these files first: its result stands
                break
            done.append(compacted)
    return done, removed


async def _compact(spark: SparkSession, catalog_path: str, date: str, inputs: list[DataFile], lease: Lease
                   ) -> Compacted | None:
    token, work = await asyncio.to_thread(new_work_dir, catalog_path)
    try:
        written, rows = await asyncio.to_thread(_rewrite, spark, catalog_path, date, inputs, work)
        async with lease():
            return await finish_in_thread(_publish_if_current, catalog_path, date, token, inputs, written, rows)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


def _rewrite(spark: SparkSession, catalog_path: str, date: str, inputs: list[DataFile], work: str
             ) -> tuple[str, int]:
    """The inputs' rows as one sorted file under ``work``, and their number, checked against the inputs'."""
    rows = catalog.read(spark, catalog_path, [found.path for found in inputs])
    expected = rows.count()  # from the files' footers: no data is read
    out = os.path.join(work, "out")
    rows.drop(PARTITION_COLUMN).repartition(1).sortWithinPartitions(*SORT_COLUMNS).write.parquet(out)
    written = [os.path.join(out, name) for name in os.listdir(out)
               if name.endswith(PARQUET_SUFFIX) and not name.startswith(HIDDEN_PREFIXES)]
    got = spark.read.schema(catalog.SCHEMA).parquet(*written).count() if written else 0
    if len(written) != 1 or got != expected:
        raise CompactionFailed(f"compaction of {date} wrote {len(written)} file(s) with {got} rows for {expected}; "
                               "nothing was replaced")
    return written[0], expected


def _publish_if_current(catalog_path: str, date: str, token: str, inputs: list[DataFile], written: str,
                        rows: int) -> Compacted | None:
    """Publish ``written`` in place of ``inputs`` if every one is still a data file and none an output whose own
    inputs are not removed yet (manifests never chain). The caller holds the lease."""
    paths = [found.path for found in inputs]
    if not {found.path for found in partition_files(catalog_path, date)}.issuperset(paths):
        return None
    if pending_outputs(partition_dir(catalog_path, date)).intersection(os.path.basename(path) for path in paths):
        return None
    size = os.path.getsize(written)
    published = publish(partition_dir(catalog_path, date), token, written, paths)
    return Compacted(date, published, tuple(paths), rows, sum(found.size for found in inputs), size)
