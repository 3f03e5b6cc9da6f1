"""``archive_ingest``: register data files (FITS or not) in the archive, in micro-batches run as Spark jobs.

The pop daemon calls :meth:`ArchiveIngestAction.run` once per record, many at once; a micro-batcher
(:mod:`..batcher`) gathers those calls into a batch (cut at ``batch_size`` records or ``batch_age`` seconds after
its first) and the batch becomes one Spark job (:mod:`.job`): executors verify each file's size and checksum,
copy it into the content-addressed store ``<archive_root>/ab/cd/abcd...`` and read its FITS header; the driver
appends one catalog row per new checksum (:mod:`.catalog`). Every ``run`` still gets its own outcome: one bad
file fails its record, not its batch.

Batches fill because the pop daemon runs at least twice ``batch_size`` records at once whatever ``[pop]
concurrency`` says (:meth:`ArchiveIngestAction.records_at_once`): one batch is copied while the previous one is
appended.

Idempotent: a checksum already in the catalog succeeds without a copy or a row. Every copy is named in the
archive root's manifest of the day (``<archive_root>/.dataq/manifests``, as ``disk_store``'s) before its record
is done, so ``dataq audit --copies`` checks archives too. One catalog writer at a time:
the append holds the queue's catalog lease (:meth:`dataq.store.QueueStore.lease`, renewed while it runs), so pop
daemons of one queue never tear down each other's appends; a queue's daemons must not share a catalog with
another queue's (the lease is per queue). A lease found lost after an append fails the batch's records, which
then run again and find their rows: the catalog never counts an append it cannot vouch for.

The SparkSession is started lazily (first batch), shared by the process, and stopped at :meth:`close`; Spark's
blocking calls run in worker threads. Spark needs Java 17 or later: :meth:`start` checks, and says so plainly.

Options: :class:`ArchiveIngestOptions` (``[queues.NAME.archive_ingest]``; only ``archive_root`` is required).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataq.actions.archive.upkeep import CatalogUpkeep
from dataq.actions.base import Action, ActionContext
from dataq.actions.batcher import BATCHES_IN_FLIGHT, MicroBatcher
from dataq.actions.files import finish_in_thread
from dataq.audit import manifest
from dataq.checksum import check_algorithm
from dataq.errors import ActionError, ConfigError, Retryable, StoreError
from dataq.logs import get_logger
from dataq.record import Record

if TYPE_CHECKING:
    from dataq.actions.archive.job import IngestJob, Metadata, Result
    from dataq.actions.archive.session import SessionSpec

DEFAULT_MASTER = "local[*]"
DEFAULT_APP_NAME = "dataq-archive-ingest"
DEFAULT_BATCH_SIZE = 500
DEFAULT_BATCH_AGE = 5.0
DEFAULT_DRIVER_HOST = "127.0.0.1"
DEFAULT_LEASE_TTL = 60.0
CATALOG_DIR = "catalog"
"""The catalog's directory under the archive root when ``catalog`` is not set."""
LEASE_NAME = "archive-catalog"
MIN_JAVA_MAJOR = 17
JAVA_VERSION_TIMEOUT = 30.0
DEFAULT_COMPACT_FILES = 64
DEFAULT_COMPACT_TARGET_MB = 128
DEFAULT_COMPACT_GRACE = 300.0
CLOSE_DRAIN_TIMEOUT = 60.0
"""Seconds :meth:`ArchiveIngestAction.close` waits for running batches before it stops Spark under them."""
CANCEL_WAIT = 10.0
"""Seconds cancelled batches get to end an append they began before Spark is stopped under them."""
ERROR_MAX_CHARS = 500
"""A Spark error carries a Java stack trace; a record's error keeps its first line, cut to this length."""
INSTALL_HINT = "pip install 'dataq[spark]'"
FIXED_CONF = frozenset({"spark.sql.session.timeZone"})
"""Spark conf the options may not set: the catalog's queries (``--since``, ``--obs-date``, nights) are UTC."""
_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')

log = get_logger()


@dataclass(frozen=True, slots=True)
class ArchiveIngestOptions:
    """Options of ``archive_ingest`` (``[queues.NAME.archive_ingest]``)."""

    archive_root: str
    """Absolute directory of the content-addressed store; on a Spark cluster, shared by driver and workers."""
    catalog: str | None = None
    """Absolute directory of the catalog's Parquet table (None: ``<archive_root>/catalog``)."""
    master: str = DEFAULT_MASTER
    """Spark master URL: ``local[*]``, ``local[N]``, or ``spark://host:7077`` for a standalone cluster."""
    app_name: str = DEFAULT_APP_NAME
    """The Spark application's name, as a Spark cluster's master and its logs show it."""
    conf: tuple[str, ...] = ()
    """Extra Spark conf as ``key=value`` entries; they override dataq's defaults (loopback driver, no UI)."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Most records in one Spark job."""
    batch_age: float = DEFAULT_BATCH_AGE
    """Seconds after its first record that a batch is cut however small it is."""
    driver_host: str = DEFAULT_DRIVER_HOST
    """Address the Spark driver binds to and announces; a cluster's workers must reach it."""
    lease_ttl: float = DEFAULT_LEASE_TTL
    """Seconds the catalog lease outlives a writer that died while appending."""
    checksum_algorithm: str | None = None
    """The records' checksum algorithm (and of the store's names); None: the queue's ``checksum``."""
    fsync: bool = True
    """Make each archived copy durable before its record is acknowledged."""
    timeout: float | None = None
    """Seconds a record may wait for, and take in, its batch (None: the queue's ``action_timeout``)."""
    compact_files: int = DEFAULT_COMPACT_FILES
    """Small files in an ingest date's partition that make the ingest compact it by itself (0: only
    ``dataq archive compact`` does)."""
    compact_target_mb: int = DEFAULT_COMPACT_TARGET_MB
    """Size of a compacted file: files below it are merged, up to it."""
    compact_grace: float = DEFAULT_COMPACT_GRACE
    """Seconds the files a compaction replaced stay on disk for readers that listed them before."""
    night_utc_offset: float = 0.0
    """Hours from UTC of the site's local time: an observing night, in ``dataq archive stats --by-night``, runs
    from local noon to noon and is named after the date on which it began."""

    def __post_init__(self) -> None:
        for key in ("archive_root", "catalog"):
            value = getattr(self, key)
            if value is not None and not os.path.isabs(value):
                raise ValueError(f"{key} must be an absolute path, got {value!r}")
        if not self.master or not self.app_name or not self.driver_host:
            raise ValueError("master, app_name and driver_host must not be empty")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        for key in ("batch_age", "lease_ttl", "timeout"):
            value = getattr(self, key)
            if value is not None and not 0 < value < float("inf"):
                raise ValueError(f"{key} must be a positive number of seconds, got {value}")
        if self.compact_files < 0 or self.compact_target_mb < 1:
            raise ValueError(f"compact_files must be 0 or more and compact_target_mb at least 1, got "
                             f"{self.compact_files} and {self.compact_target_mb}")
        if not 0 <= self.compact_grace < float("inf"):
            raise ValueError(f"compact_grace must be 0 or more seconds, got {self.compact_grace}")
        if not -12 <= self.night_utc_offset <= 14:
            raise ValueError(f"night_utc_offset must be hours from UTC between -12 and 14, got {self.night_utc_offset}")
        if self.checksum_algorithm is not None:
            check_algorithm(self.checksum_algorithm)
        for entry in self.conf:
            key, sep, _ = entry.partition("=")
            if not sep or not key.strip().startswith("spark."):
                raise ValueError(f"conf entry {entry!r} must read 'spark.some.key=value'")
            if key.strip() in FIXED_CONF:
                raise ValueError(f"conf entry {entry!r}: dataq sets {key.strip()} itself (the catalog's times are UTC)")

    @property
    def catalog_path(self) -> str:
        return self.catalog or os.path.join(self.archive_root, CATALOG_DIR)

    @property
    def compact_target_bytes(self) -> int:
        return self.compact_target_mb << 20

    @property
    def spark_conf(self) -> dict[str, str]:
        return {key.strip(): value.strip() for key, _, value in (entry.partition("=") for entry in self.conf)}

    def session_spec(self) -> SessionSpec:
        from dataq.actions.archive.session import session_spec

        return session_spec(self.master, self.app_name, self.spark_conf, self.driver_host)


# --- requirements ------------------------------------------------------------------------------------------------


def find_java(environ: Mapping[str, str] | None = None) -> str:
    """The java Spark will run: ``$JAVA_HOME/bin/java``, else ``java`` on PATH (as ``spark-class`` chooses)."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise ConfigError(f"archive_ingest runs on Spark, which needs Java {MIN_JAVA_MAJOR} or later: "
                              f"JAVA_HOME is {home!r} but {java} is not an executable")
        return java
    found = shutil.which("java", path=env.get("PATH", os.defpath))
    if found is None:
        raise ConfigError(f"archive_ingest runs on Spark, which needs Java {MIN_JAVA_MAJOR} or later, and none was "
                          "found: JAVA_HOME is unset and no 'java' is on PATH. Install a Java runtime (Debian: "
                          f"apt-get install openjdk-{MIN_JAVA_MAJOR}-jre-headless) or set JAVA_HOME")
    return found


def check_java(environ: Mapping[str, str] | None = None) -> int:
    """The major version of the java Spark will run; ConfigError when there is none or it is too old."""
    java = find_java(environ)
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=JAVA_VERSION_TIMEOUT,
                              env=None if environ is None else dict(environ), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"archive_ingest: cannot run {java} -version: {exc}") from exc
    match = _JAVA_VERSION.search(done.stderr + done.stdout)
    if match is None:
        raise ConfigError(f"archive_ingest: {java} -version did not say which version it is "
                          f"(exit status {done.returncode}): {(done.stderr or done.stdout).strip()[:200]!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # Java 8 and older call themselves 1.8, 1.7...
        major = int(match.group(2))
    if major < MIN_JAVA_MAJOR:
        raise ConfigError(f"archive_ingest runs on Spark, which needs Java {MIN_JAVA_MAJOR} or later; {java} is "
                          f"Java {major}. Install a newer one and point JAVA_HOME at it")
    return major


def check_requirements(environ: Mapping[str, str] | None = None) -> None:
    """ConfigError unless pyspark, astropy and Java 17+ are there: a plain message instead of a stack trace."""
    missing = [name for name in ("pyspark", "astropy") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"archive_ingest needs {' and '.join(missing)} (not installed): {INSTALL_HINT}")
    check_java(environ)


def brief(exc: BaseException) -> str:
    """The line of an error worth a record's last error (Py4J's first line only names the Java call)."""
    lines = [line.strip(" :") for line in str(exc).splitlines() if line.strip(" :")]
    useful = [line for line in lines if not line.startswith("An error occurred while calling")]
    first = (useful or lines or [type(exc).__name__])[0]
    return first if len(first) <= ERROR_MAX_CHARS else first[: ERROR_MAX_CHARS - 3] + "..."


def spark_failure(exc: BaseException, spark: str) -> ActionError:
    """A Spark job's failure: Retryable when the driver lost its way to the JVM or the cluster (Py4J's network
    error, a refused connection), which is an outage of ``spark``; else the batch's records are at fault."""
    lost = isinstance(exc, ConnectionError) or any(cls.__name__ == "Py4JNetworkError" for cls in type(exc).__mro__)
    message = f"Spark job failed: {brief(exc)}"
    return Retryable(message, destination=spark) if lost else ActionError(message)


# --- the action ----------------------------------------------------------------------------------------------------


class ArchiveIngestAction(Action[ArchiveIngestOptions]):
    """Verify, copy into the content-addressed archive and catalog each record's file, batch by batch on Spark."""

    name = "archive_ingest"
    Options = ArchiveIngestOptions

    def __init__(self, options: ArchiveIngestOptions, context: ActionContext) -> None:
        super().__init__(options, context)
        self._batcher: MicroBatcher[Record, ActionError | None] = MicroBatcher(
            self._ingest, size=options.batch_size, age=options.batch_age, in_flight=BATCHES_IN_FLIGHT)
        self._job: IngestJob | None = None
        self._job_lock = asyncio.Lock()
        self._commit_lock = asyncio.Lock()
        self._upkeep = CatalogUpkeep(options.catalog_path, self._lease, compact_files=options.compact_files,
                                     target_bytes=options.compact_target_bytes, grace=options.compact_grace)

    async def start(self) -> None:
        await asyncio.to_thread(check_requirements)
        try:
            await asyncio.to_thread(os.makedirs, self.options.catalog_path, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"archive_ingest: cannot create {self.options.catalog_path}: {exc}") from exc

    def records_at_once(self) -> int:
        return BATCHES_IN_FLIGHT * self.options.batch_size

    @property
    def _spark(self) -> str:
        return f"spark {self.options.master}"

    def destination(self, record: Record) -> str | None:
        return self._spark

    async def run(self, record: Record) -> None:
        error = await self._batcher.submit(record)
        if error is not None:
            raise error

    async def close(self) -> None:
        deadline = time.monotonic() + CLOSE_DRAIN_TIMEOUT  # one budget for batches and compaction together
        closing = asyncio.create_task(self._batcher.close(CLOSE_DRAIN_TIMEOUT))
        # A cancelled batch still finishes an append it began (finish_in_thread); should Spark hang in it, stopping
        # Spark under it is the only way out.
        if not (await asyncio.wait([closing], timeout=CLOSE_DRAIN_TIMEOUT + CANCEL_WAIT))[0]:
            await self._stop_spark()
        if not await closing:
            log.warning("archive batches still running at shutdown; stopping Spark under them (their records "
                        "were not acknowledged and will run again)", seconds=CLOSE_DRAIN_TIMEOUT)
        await self._upkeep.close(within=deadline - time.monotonic())
        await self._stop_spark()

    async def _stop_spark(self) -> None:
        if self._job is not None:
            from dataq.actions.archive.session import SESSIONS

            self._job = None
            await asyncio.to_thread(SESSIONS.release)  # stopping the session fails the Spark calls still running

    async def _ingest_job(self) -> IngestJob:
        async with self._job_lock:
            if self._job is None:
                from dataq.actions.archive.job import IngestJob
                from dataq.actions.archive.session import SESSIONS

                try:
                    spark = await asyncio.to_thread(SESSIONS.acquire, self.options.session_spec())
                except Exception as exc:
                    # Java and pyspark were checked at start-up: what fails here is reaching the master.
                    raise Retryable(f"Spark did not start: {brief(exc)}",
                                    destination=self._spark) from exc
                self._job = IngestJob(spark, archive_root=self.options.archive_root,
                                      catalog_path=self.options.catalog_path, queue=self.queue.name,
                                      algorithm=self.algorithm, fsync=self.options.fsync)
            return self._job

    async def _ingest(self, records: list[Record]) -> list[ActionError | None]:
        """One batch: per record None (archived, now or before) or what failed."""
        started = time.monotonic()
        firsts: dict[str, Record] = {}
        for record in records:  # a checksum twice in one batch is ingested once; both get its outcome
            firsts.setdefault(record.checksum, record)
        unique = list(firsts.values())
        errors: dict[str, str] = {}
        try:
            job = await self._ingest_job()
            known, seen = await asyncio.to_thread(job.archived, [record.checksum for record in unique])
            checked = time.monotonic()
            todo = [record for record in unique if record.checksum not in known]
            items = [(position, r.path, r.checksum, r.size) for position, r in enumerate(todo)]
            results = await asyncio.to_thread(job.process, items) if items else []
            copied = time.monotonic()
        except ActionError as exc:
            return [exc] * len(records)
        except Exception as exc:
            log.exception("archive batch failed in Spark", records=len(records))
            return [spark_failure(exc, self._spark)] * len(records)
        archived = _sort_results(todo, results, errors)
        present: set[str] = set()
        if archived:
            try:
                present, partition = await self._commit(job, archived, seen)
            except Exception as exc:
                if not isinstance(exc, (ActionError, StoreError)):
                    log.exception("archive catalog append failed", records=len(archived))
                for _, checksum, _ in archived:
                    errors[checksum] = f"catalog append failed: {brief(exc)}"
            else:
                self._upkeep.after_append(job.spark, partition)
        log.info("archive batch", records=len(records), archived=len(archived) - len(present),
                 already=len(known) + len(present), failed=len(errors), check_s=round(checked - started, 3),
                 copy_s=round(copied - checked, 3), append_s=round(time.monotonic() - copied, 3))
        for checksum, message in errors.items():
            log.warning("archive ingest failed", id=checksum, error=message)
        failures: dict[str, ActionError] = {checksum: ActionError(message) for checksum, message in errors.items()}
        named = await self._name_copies([record for record in unique if record.checksum not in failures])
        if named is not None:
            failures.update({record.checksum: named for record in unique if record.checksum not in failures})
        return [failures.get(record.checksum) for record in records]

    async def _name_copies(self, archived: list[Record]) -> ActionError | None:
        """Name the batch's copies in the archive root's manifest (:mod:`dataq.audit.manifest`), durably, before
        their records are done (those archived before too: their lines may be what a crash lost); what failed."""
        from dataq.actions.archive.job import archive_relative

        entries = [manifest.Entry(record.checksum, archive_relative(record.checksum), record.size)
                   for record in archived]
        try:
            await asyncio.to_thread(manifest.append, self.options.archive_root, self.algorithm, entries, sync=True)
        except OSError as exc:
            return Retryable(f"cannot name the copies in the manifest under {self.options.archive_root}: "
                             f"{exc.strerror or exc}", destination=self.options.archive_root)
        return None

    async def _commit(self, job: IngestJob, archived: list[tuple[str, str, Metadata]], seen: frozenset[str]
                      ) -> tuple[set[str], str]:
        """Append the batch's rows holding the queue's catalog lease (waiting for another writer up to the
        action's timeout)."""
        async with self._commit_lock, self._lease():
            # A batch cancelled now (its records timed out) still lets the append end before the lease goes:
            # another writer must never find it half done.
            return await finish_in_thread(job.commit, archived, seen)

    def _lease(self) -> AbstractAsyncContextManager[None]:
        """The queue's catalog lease, waited for up to the action's timeout."""
        return self.context.leases.lease(LEASE_NAME, ttl=self.options.lease_ttl, wait=self.timeout)


def _sort_results(todo: Sequence[Record], results: Sequence[Result], errors: dict[str, str]
                  ) -> list[tuple[str, str, Metadata]]:
    """(path, checksum, metadata) of the archived records; what failed goes into ``errors``."""
    archived = []
    for position, error, meta in results:
        record = todo[position]
        if error is not None or meta is None:
            errors[record.checksum] = error or "no metadata"
        else:
            archived.append((record.path, record.checksum, meta))
    answered = {checksum for _, checksum, _ in archived} | set(errors)
    for record in todo:  # a result Spark lost must not count as a success
        if record.checksum not in answered:
            errors[record.checksum] = "the Spark job returned no result for this record"
    return archived
