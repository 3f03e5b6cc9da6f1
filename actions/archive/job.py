"""The Spark side of archive ingest: what an executor does with each file, and the driver's job per batch.

Executors run :func:`ingest_partition` over plain tuples and return plain tuples. This module is shipped to them
by value (cloudpickle), so a Spark worker needs Python with pyspark and astropy, not dataq. Per file an executor
reads the source once, hashing it while writing a hidden temporary copy next to its content-addressed place
(``<archive_root>/ab/cd/abcd...``), and publishes the copy with one rename only after size and checksum match the
record; then it reads the FITS headers (:mod:`.headers`; from the bytes already read when the file is in them).

The driver (:class:`IngestJob`) makes one Spark job per batch and appends the successes to the catalog. Its
methods block; the action calls them from worker threads. One SparkSession serves the whole process
(:data:`dataq.actions.archive.session.SESSIONS`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import heapq
import io
import os
import secrets
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import SparkSession

from dataq.actions.archive import catalog, headers, obstime
from dataq.actions.archive.catalog_files import OUTPUT_PREFIX, data_files, replaced_by
from dataq.actions.archive.headers import read_header
from dataq.checksum import digest_width, new_hasher

CHUNK_BYTES = 1 << 20
"""Read size; a file no larger is read (and hashed, and its header parsed) from one buffer."""
TEMP_SUFFIX = ".dataq-tmp"
"""Marks an unfinished copy in the archive; the leading dot hides it, as the other storing actions do."""
TEMP_TOKEN_BYTES = 4
HEX_DIGITS = frozenset("0123456789abcdef")
ARCHIVED_MODE = 0o444
"""Archived copies are read-only: the content-addressed name promises the content never changes."""
OWN_CHECKSUMS_MAX = 1_000_000
"""Checksums this process appended that it remembers (to skip re-reading its own catalog files); ~100 MB."""

Item = tuple[int, str, str, int]
"""What an executor gets per record: (position in the batch, path, checksum, size)."""
Metadata = tuple[Any, ...]
"""What it returns per archived file: (size, mtime, archive_path, is_fits, fits_error, extensions, obs_time,
*FITS keyword values)."""
Result = tuple[int, str | None, Metadata | None]
"""(position, error or None, metadata or None)."""


class IngestFailure(Exception):
    """A file cannot be archived; the message becomes the record's error."""


# --- executor side -------------------------------------------------------------------------------------------


def archive_relative(checksum: str) -> str:
    """Where a checksum's content lives under the archive root: two levels of 256 directories."""
    return f"{checksum[0:2]}/{checksum[2:4]}/{checksum}"


def ingest_partition(archive_root: str, algorithm: str, fsync: bool,
                     bins: Iterable[Sequence[Item]]) -> Iterator[Result]:
    """mapPartitions body: archive every item of the partition's bins; one bad file fails only its own item."""
    for items in bins:
        for position, path, checksum, size in items:
            try:
                meta = ingest_file(path, checksum, size, archive_root, algorithm=algorithm, fsync=fsync)
            except IngestFailure as exc:
                yield position, str(exc), None
            except Exception as exc:  # a bug or an unforeseen OSError: still only this record's failure
                yield position, f"{type(exc).__name__}: {exc}", None
            else:
                yield position, None, meta


def ingest_file(path: str, checksum: str, size: int, archive_root: str, *, algorithm: str = "md5",
                fsync: bool = True) -> Metadata:
    """Verify one file against its record, copy it into the archive (unless there already), extract metadata."""
    hasher = new_hasher(algorithm)
    if len(checksum) != digest_width(algorithm) or not HEX_DIGITS.issuperset(checksum):
        raise IngestFailure(f"checksum {checksum!r} is not a lower-case hex {algorithm} digest")
    relative = archive_relative(checksum)
    target = os.path.join(archive_root, relative)
    source, info = _open_source(path, size)
    with source:
        temp = None if _archived(target, size) else _open_temp(target)
        try:
            head = _stream(source, path, hasher, size, temp[1] if temp else None, target)
            if temp is not None and fsync:
                os.fsync(temp[1])
        except BaseException:
            if temp is not None:
                _discard(temp)
            raise
        if temp is not None:
            os.close(temp[1])
    digest = hasher.hexdigest()
    if digest != checksum:
        if temp is not None:
            _unlink_quietly(temp[0])
        raise IngestFailure(f"checksum mismatch: {path} has {algorithm} {digest}, its record says {checksum}")
    if temp is not None:
        _publish(temp[0], target, fsync)
    is_fits, fits_error, extensions, obs_time, values = read_header(path, head, size, stored=target)
    return (size, info.st_mtime, relative, is_fits, fits_error, extensions, obs_time, *values)


def _open_source(path: str, size: int) -> tuple[io.FileIO, os.stat_result]:
    try:
        # O_NONBLOCK: a FIFO under the path must not hang the task (it is refused below as not a regular file).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise IngestFailure(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IngestFailure(f"{path} is not a regular file")
        if info.st_size != size:
            raise IngestFailure(f"size mismatch: {path} is {info.st_size} bytes, its record says {size}")
        return open(fd, "rb", buffering=0), info
    except BaseException:
        os.close(fd)
        raise


def _archived(target: str, size: int) -> bool:
    # A copy under its final name was verified before its rename, so the right size means the right content.
    try:
        return os.stat(target).st_size == size
    except FileNotFoundError:
        return False


def _open_temp(target: str) -> tuple[str, int]:
    directory, name = os.path.split(target)
    temp = os.path.join(directory, f".{name}.{secrets.token_hex(TEMP_TOKEN_BYTES)}{TEMP_SUFFIX}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        try:
            return temp, os.open(temp, flags, ARCHIVED_MODE)
        except FileNotFoundError:  # first file of this directory: create it only now, saving a stat per file
            os.makedirs(directory, exist_ok=True)
            return temp, os.open(temp, flags, ARCHIVED_MODE)
    except OSError as exc:
        raise IngestFailure(f"cannot write into the archive at {directory}: {exc.strerror or exc}") from None


def _stream(source: io.FileIO, path: str, hasher: Any, size: int, out: int | None, target: str) -> bytes:
    """Hash the whole source (copying it to ``out``); returns its first chunk (where a FITS header is)."""
    head, total = b"", 0
    while True:
        try:
            chunk = source.read(CHUNK_BYTES)
        except OSError as exc:
            raise IngestFailure(f"cannot read {path}: {exc.strerror or exc}") from None
        if not chunk:
            break
        if not head:
            head = chunk
        total += len(chunk)
        hasher.update(chunk)
        if out is not None:
            try:
                _write_all(out, chunk)
            except OSError as exc:
                raise IngestFailure(f"cannot write {target}: {exc.strerror or exc}") from None
    if total != size:
        raise IngestFailure(f"{path} changed while it was read: {total} bytes read, its record says {size}")
    return head


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _publish(temp: str, target: str, fsync: bool) -> None:
    try:
        os.replace(temp, target)
        if fsync:  # the rename itself is durable only once its directory is
            directory = os.open(os.path.dirname(target), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    except OSError as exc:
        _unlink_quietly(temp)
        raise IngestFailure(f"cannot publish {target}: {exc.strerror or exc}") from None


def _discard(temp: tuple[str, int]) -> None:
    os.close(temp[1])
    _unlink_quietly(temp[0])


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


# Ship the functions above (and the header and date readers they call) by value: executors then need no dataq
# installed, only pyspark and astropy.
for _module in (sys.modules[__name__], headers, obstime):
    cloudpickle.register_pickle_by_value(_module)  # type: ignore[no-untyped-call]


# --- driver side ---------------------------------------------------------------------------------------------


def balance(items: Sequence[Item], slots: int) -> list[list[Item]]:
    """Split items into at most ``slots`` bins of about equal bytes (largest first), one bin per Spark task."""
    count = max(1, min(slots, len(items)))
    bins: list[list[Item]] = [[] for _ in range(count)]
    loads = [(0, index) for index in range(count)]
    for item in sorted(items, key=lambda item: item[3], reverse=True):
        load, index = heapq.heappop(loads)
        bins[index].append(item)
        heapq.heappush(loads, (load + item[3] + 1, index))  # +1: empty files still cost a task some time
    return [b for b in bins if b]


class IngestJob:
    """The driver's side of one archive: which checksums are archived already, the Spark job, the append."""

    def __init__(self, spark: SparkSession, *, archive_root: str, catalog_path: str, queue: str,
                 algorithm: str, fsync: bool) -> None:
        self.spark, self.archive_root, self.catalog_path = spark, archive_root, catalog_path
        self.queue, self.algorithm, self.fsync = queue, algorithm, fsync
        # Catalog files this process wrote (or compaction outputs of only those) and every checksum in them:
        # those files need no re-reading.
        self._own_files: set[str] = set()
        self._own_checksums: set[str] = set()
        self._foreign_outputs: set[str] = set()

    def archived(self, checksums: Iterable[str]) -> tuple[set[str], frozenset[str]]:
        """Which checksums the catalog already holds, and the catalog files that answer was read from."""
        wanted = set(checksums)
        files = data_files(self.catalog_path)
        self._adopt_outputs(files)
        known = wanted & self._own_checksums
        known |= catalog.existing_checksums(self.spark, self.catalog_path, wanted - known, files - self._own_files)
        return known, files

    def process(self, items: Sequence[Item]) -> list[Result]:
        """One Spark job over the items: verify, copy, extract; a result per item, in no particular order."""
        context = self.spark.sparkContext
        bins = balance(items, context.defaultParallelism)
        body = functools.partial(ingest_partition, self.archive_root, self.algorithm, self.fsync)
        results: list[Result] = context.parallelize(bins, len(bins)).mapPartitions(body).collect()
        return results

    def commit(self, archived: Sequence[tuple[str, str, Metadata]], seen: frozenset[str]) -> tuple[set[str], str]:
        """Append a row per (path, checksum, metadata) unless its checksum reached the catalog since ``seen`` was
        listed (another writer's); returns those checksums and the partition (ingest date) appended to. The caller
        holds the catalog lease."""
        before = data_files(self.catalog_path)
        self._adopt_outputs(before)
        rows = {checksum: (path, meta) for path, checksum, meta in archived}
        present = catalog.existing_checksums(self.spark, self.catalog_path, rows, before - seen - self._own_files)
        now = dt.datetime.now(dt.UTC)
        fresh = [_row(checksum, path, meta, self.queue, self.algorithm, now) for checksum, (path, meta) in rows.items()
                 if checksum not in present]
        catalog.append(self.spark, self.catalog_path, fresh)
        # Holding the lease, every file that appeared during the append is ours (compactions publish under it
        # too, but an output is never taken for ours unless it replaced only our files).
        appended = {path for path in data_files(self.catalog_path) - before
                    if not os.path.basename(path).startswith(OUTPUT_PREFIX)}
        self._remember(appended, (row[0] for row in fresh))
        return present, now.date().isoformat()

    def _remember(self, files: Iterable[str], checksums: Iterable[str]) -> None:
        self._own_files.update(files)
        self._own_checksums.update(checksums)
        if len(self._own_checksums) > OWN_CHECKSUMS_MAX:
            # Forget both together: a file is skipped only while all of its checksums are remembered.
            self._own_files.clear()
            self._own_checksums.clear()
            self._foreign_outputs.clear()

    def _adopt_outputs(self, files: Iterable[str]) -> None:
        """Count as ours a compaction's output (whoever compacted) that replaced only files of ours: its rows
        are theirs. Its manifest says so only until the replaced files are removed, so look as soon as it shows."""
        for path in files:
            if path in self._own_files or path in self._foreign_outputs:
                continue
            if not os.path.basename(path).startswith(OUTPUT_PREFIX):
                continue
            replaced = replaced_by(path)
            if replaced and self._own_files.issuperset(replaced):
                self._own_files.add(path)
            else:
                self._foreign_outputs.add(path)


def _row(checksum: str, path: str, meta: Metadata, queue: str, algorithm: str, now: dt.datetime) -> tuple[Any, ...]:
    size, mtime, relative, is_fits, fits_error, extensions, obs_time, *values = meta
    modified = dt.datetime.fromtimestamp(mtime, dt.UTC)
    return (checksum, size, modified, path, relative, queue, now, is_fits, fits_error, *values, extensions, obs_time,
            algorithm, now.date())
