"""The archive catalog: one Parquet row per archived file, partitioned by ingest date, queried with Spark SQL.

Layout: ``<catalog>/ingest_date=YYYY-MM-DD/part-*.parquet`` (UTC dates). Rows are appended only by
:meth:`dataq.actions.archive.job.IngestJob.commit`, under the catalog lease, so there is one writer at a time:
Spark's appends share a ``_temporary`` directory that two concurrent writers would tear down under each other.
Compaction (:mod:`.compaction`) replaces small files by ``compact-*.parquet`` ones, publishing under the same
lease. Readers need no lease: an append publishes whole files, files whose names start with ``_`` or ``.``
(unfinished appends) are ignored by Spark and by :func:`.catalog_files.data_files` alike, and that listing leaves
out what a compaction replaced.

Each checksum appears at most once (the ingest checks the catalog under the lease before appending); a row
names the archived copy by its path relative to the archive root (``ab/cd/abcd...``, see ``archive_relative``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dataq.actions.archive.catalog_files import PARTITION_COLUMN, data_files

ROWS = "{rows}"
"""Where the ``ls``/``stats`` SQL names the catalog: each query gets its own DataFrame (a shared temporary view
would let two threads' queries swap catalogs under each other)."""
DEFAULT_LS_LIMIT = 100
NIGHT_TURNS_AT_HOUR = 12
"""An observing night is named after the local date on which it began: it runs from local noon to noon."""

FITS_KEYWORDS: tuple[tuple[str, str, str], ...] = (
    ("DATE-OBS", "date_obs", "string"),
    ("TIME-OBS", "time_obs", "string"),
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
"""Header keyword -> catalog column and its type: what an archive indexes (from the primary header, else the
first image extension: :mod:`.headers`). RA and DEC stay text, as NOAO headers write them sexagesimal
(``'12:34:56.7'``); a numeric value is kept as its text. DATE-OBS and TIME-OBS keep the header's own text;
``obs_time`` is what they mean. ``mjd_obs`` is the header's MJD-OBS, else computed from ``obs_time``."""

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
    StructField("extensions", IntegerType()),
    StructField("obs_time", TimestampType()),
    StructField("checksum_algorithm", StringType()),
    StructField(PARTITION_COLUMN, DateType()),
])
"""Column order is the order of the tuples :func:`append` takes. Parquet files are read by column name, so files
written before a column was added read it as null (``time_obs``, ``extensions`` and ``obs_time`` came later;
``checksum_algorithm``, the queue's ``checksum``, too: null is md5, the only one before it)."""
LS_COLUMNS = ("ingest_date", "checksum", "size", "instrument", "date_obs", "obs_time", "object", "exptime", "path")
"""What ``dataq archive ls`` shows as text (``--json`` gives every column)."""


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


@dataclass(frozen=True, slots=True)
class Filters:
    """What ``dataq archive ls`` selects; every filter given must hold. Times are UTC."""

    date: dt.date | None = None
    """Ingest date."""
    obs_date: dt.date | None = None
    """The UTC date of ``obs_time`` (or, in rows cataloged before ``obs_time`` existed, DATE-OBS's first ten
    characters)."""
    since: dt.datetime | None = None
    """Observed at or after."""
    until: dt.datetime | None = None
    """Observed before."""
    instrument: str | None = None
    """INSTRUME, whole and case-insensitive."""
    telescope: str | None = None
    """TELESCOP, whole and case-insensitive."""
    object: str | None = None
    """Part of OBJECT, case-insensitive."""
    checksum: str | None = None
    fits_errors: bool = False

    def where(self) -> tuple[str, dict[str, Any]]:
        """The SQL condition and its named arguments (values are never spliced into the SQL)."""
        conditions: list[str] = []
        args: dict[str, Any] = {}
        if self.date is not None:
            conditions.append("ingest_date = :date")
            args["date"] = self.date
        if self.obs_date is not None:
            conditions.append("(to_date(obs_time) = :obs_date "
                              "OR (obs_time IS NULL AND substr(date_obs, 1, 10) = :obs_date_text))")
            args["obs_date"], args["obs_date_text"] = self.obs_date, self.obs_date.isoformat()
        # Times travel as text and are read in the session's time zone (UTC): a Python datetime would be taken
        # in the local time zone of the machine running the query.
        if self.since is not None:
            conditions.append("obs_time >= CAST(:since AS TIMESTAMP)")
            args["since"] = _utc_text(self.since)
        if self.until is not None:
            conditions.append("obs_time < CAST(:until AS TIMESTAMP)")
            args["until"] = _utc_text(self.until)
        for column in ("instrument", "telescope"):
            if getattr(self, column) is not None:
                conditions.append(f"lower({column}) = lower(:{column})")
                args[column] = getattr(self, column)
        if self.object is not None:
            conditions.append("instr(lower(object), lower(:object)) > 0")
            args["object"] = self.object
        if self.checksum is not None:
            conditions.append("checksum = :checksum")
            args["checksum"] = self.checksum
        if self.fits_errors:
            conditions.append("fits_error IS NOT NULL")
        return (f"WHERE {' AND '.join(conditions)}" if conditions else ""), args


def list_rows(spark: SparkSession, catalog: str, filters: Filters = Filters(), *,
              limit: int = DEFAULT_LS_LIMIT) -> list[dict[str, Any]]:
    """Catalog rows matching ``filters``, newest ingest first."""
    where, args = filters.where()
    return _query(spark, catalog, f"SELECT * FROM {ROWS} {where} "
                                  f"ORDER BY ingested_at DESC, checksum LIMIT {int(limit)}", args)


def stats(spark: SparkSession, catalog: str, *, by_instrument: bool = False, by_night: bool = False,
          utc_offset: float = 0.0) -> list[dict[str, Any]]:
    """Files, bytes, FITS files and exposure per ingest day, or per observing night (the local date on which it
    began, at ``utc_offset`` hours from UTC; rows with no observation time have none), and per instrument when
    asked; oldest first."""
    day = "night" if by_night else "ingest_date"
    group = f"{day}, instrument" if by_instrument else day
    shift = round((utc_offset - NIGHT_TURNS_AT_HOUR) * 3600)
    source = (f"(SELECT *, to_date(timestampadd(SECOND, {shift}, obs_time)) AS night FROM {ROWS})"
              if by_night else ROWS)
    return _query(spark, catalog, f"SELECT {group}, count(*) AS files, sum(size) AS bytes, "
                                  "count_if(is_fits) AS fits_files, count_if(fits_error IS NOT NULL) AS fits_errors, "
                                  "sum(exptime) AS exptime, min(obs_time) AS first_obs, max(obs_time) AS last_obs "
                                  f"FROM {source} GROUP BY {group} ORDER BY {group}", {})


def _query(spark: SparkSession, catalog: str, sql: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    files = data_files(catalog)
    if not files:
        return []
    rows: list[Row] = spark.sql(sql, args=args, rows=read(spark, catalog, files)).collect()
    return [{key: _aware(value) for key, value in row.asDict().items()} for row in rows]


def _aware(value: Any) -> Any:
    """pyspark gives timestamps as naive datetimes in the local time zone; the catalog's are UTC instants."""
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.astimezone(dt.UTC)
    return value


def _utc_text(when: dt.datetime) -> str:
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    return when.isoformat(sep=" ")
