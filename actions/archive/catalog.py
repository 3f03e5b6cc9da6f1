"""The archive catalog: one Parquet row per archived file, partitioned by ingest date, queried with Spark SQL.

Layout: ``<catalog>/ingest_date=YYYY-MM-DD/part-*.parquet`` (UTC dates). Rows are appended only by
:meth:`dataq.actions.archive.job.IngestJob.commit`, under the catalog lease, so there is one writer at a time:
Spark's appends share a ``_temporary`` directory that two concurrent writers would tear down under each other.
Readers need no lease: an append publishes whole files, and files whose names start with ``_`` or ``.``
(unfinished appends) are ignored by Spark and by :func:`data_files` alike.

Each checksum appears at most once (the ingest checks the catalog under the lease before appending); a row
names the archived copy by its path relative to the archive root (``ab/cd/abcd...``, see ``archive_relative``).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

PARTITION_COLUMN = "ingest_date"
VIEW_NAME = "dataq_archive_catalog"
"""The temporary view the ``ls``/``stats`` SQL reads (session-local, replaced on each query)."""
DEFAULT_LS_LIMIT = 100
PARQUET_SUFFIX = ".parquet"

FITS_KEYWORDS: tuple[tuple[str, str, str], ...] = (
    ("DATE-OBS", "date_obs", "string"),
    ("MJD-OBS", "mjd_obs", "double"),
    ("INSTRUME", "instrument", "string"),
    ("TELESCOP", "telescope", "string"),
    ("OBSERVAT", "observatory", "string"),
    ("OBJECT", "object", "string"),
    ("OBSTYPE", "obstype", "string"),
    ("FILTER", "filter", "string"),
    ("EXPTIME", "exptime", "double"),
    ("RA", "ra", "string"),
    ("DEC", "dec", "string"),
    ("PROPID", "propid", "string"),
)
"""Primary-header keyword -> catalog column and its type: what an archive indexes. RA and DEC stay text, as
NOAO headers write them sexagesimal (``'12:34:56.7'``); a numeric value is kept as its text."""

_TYPES: dict[str, DataType] = {"string": StringType(), "double": DoubleType()}

FILE_COLUMNS: tuple[StructField, ...] = (
    StructField("checksum", StringType(), nullable=False),
    StructField("size", LongType(), nullable=False),
    StructField("mtime", TimestampType()),
    StructField("path", StringType()),
    StructField("archive_path", StringType()),
    StructField("queue", StringType()),
    StructField("ingested_at", TimestampType()),
    StructField("is_fits", BooleanType()),
    StructField("fits_error", StringType()),
)
SCHEMA = StructType([
    *FILE_COLUMNS,
    *(StructField(column, _TYPES[kind]) for _, column, kind in FITS_KEYWORDS),
    StructField(PARTITION_COLUMN, DateType()),
])
"""Column order is the order of the tuples :func:`append` takes."""
LS_COLUMNS = ("ingest_date", "checksum", "size", "instrument", "date_obs", "object", "exptime", "path")
"""What ``dataq archive ls`` shows as text (``--json`` gives every column)."""


def data_files(catalog: str) -> frozenset[str]:
    """The catalog's committed Parquet files (absolute paths); empty when the catalog does not exist yet."""
    found: set[str] = set()
    for top, dirs, files in os.walk(catalog):
        # Spark's own rule: names starting with _ or . are metadata or unfinished output, never data.
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        found.update(os.path.join(top, f) for f in files if f.endswith(PARQUET_SUFFIX) and not f.startswith(("_", ".")))
    return frozenset(found)


def read(spark: SparkSession, catalog: str, files: Iterable[str] | None = None) -> DataFrame:
    """The catalog (or only ``files`` of it) as a DataFrame with :data:`SCHEMA`; empty if it has no data."""
    chosen = sorted(data_files(catalog) if files is None else files)
    if not chosen:
        return spark.createDataFrame([], SCHEMA)
    return spark.read.schema(SCHEMA).option("basePath", catalog).parquet(*chosen)


def existing_checksums(spark: SparkSession, catalog: str, checksums: Iterable[str], files: Iterable[str]) -> set[str]:
    """Which of ``checksums`` the catalog ``files`` already hold (one Spark job; none when nothing to read)."""
    wanted, chosen = sorted(set(checksums)), sorted(files)
    if not wanted or not chosen:
        return set()
    frame = read(spark, catalog, chosen).where(sf.col("checksum").isin(wanted)).select("checksum").distinct()
    return {row.checksum for row in frame.collect()}


def append(spark: SparkSession, catalog: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Append rows (tuples in :data:`SCHEMA` order); the caller holds the catalog lease."""
    if not rows:
        return
    frame = spark.createDataFrame(list(rows), SCHEMA)
    # One file per ingest date per batch: fewer, larger files keep later reads (and the dedup check) cheap.
    frame.coalesce(1).write.mode("append").partitionBy(PARTITION_COLUMN).parquet(catalog)


def list_rows(
    spark: SparkSession,
    catalog: str,
    *,
    date: dt.date | None = None,
    obs_date: str | None = None,
    instrument: str | None = None,
    checksum: str | None = None,
    fits_errors: bool = False,
    limit: int = DEFAULT_LS_LIMIT,
) -> list[dict[str, Any]]:
    """Catalog rows matching every filter given, newest ingest first; ``obs_date`` matches DATE-OBS's day."""
    conditions: list[str] = []
    args: dict[str, Any] = {}
    if date is not None:
        conditions.append("ingest_date = :date")
        args["date"] = date
    if obs_date is not None:
        conditions.append("substr(date_obs, 1, 10) = :obs_date")
        args["obs_date"] = obs_date
    if instrument is not None:
        conditions.append("lower(instrument) = lower(:instrument)")
        args["instrument"] = instrument
    if checksum is not None:
        conditions.append("checksum = :checksum")
        args["checksum"] = checksum
    if fits_errors:
        conditions.append("fits_error IS NOT NULL")
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    return _query(spark, catalog, f"SELECT * FROM {VIEW_NAME} {where} "
                                  f"ORDER BY ingested_at DESC, checksum LIMIT {int(limit)}", args)


def stats(spark: SparkSession, catalog: str, *, by_instrument: bool = False) -> list[dict[str, Any]]:
    """Files, bytes and FITS files per ingest day (and per instrument when asked), oldest day first."""
    group = "ingest_date, instrument" if by_instrument else "ingest_date"
    return _query(spark, catalog, f"SELECT {group}, count(*) AS files, sum(size) AS bytes, "
                                  "count_if(is_fits) AS fits_files, count_if(fits_error IS NOT NULL) AS fits_errors "
                                  f"FROM {VIEW_NAME} GROUP BY {group} ORDER BY {group}", {})


def _query(spark: SparkSession, catalog: str, sql: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    if not data_files(catalog):
        return []
    read(spark, catalog).createOrReplaceTempView(VIEW_NAME)
    rows: list[Row] = spark.sql(sql, args=args).collect()
    return [row.asDict() for row in rows]
