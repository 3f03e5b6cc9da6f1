"""Which Parquet files make up the catalog, and how compaction swaps small ones for a large one without a reader
ever seeing a row twice or missing one.

A partition directory holds the appends' files (``part-*.parquet``) and compaction's outputs
(``compact-<id>.parquet``). Each output has a manifest, ``_compact-<id>.json``, naming the files it replaces.
A compaction publishes in this order, steps 2 to 4 under the catalog lease (one writer at a time):

1. the output is written under ``<catalog>/_compacting/<id>/`` (hidden: names starting with ``_``);
2. the manifest is written (temporary name, fsync, rename, fsync of the directory);
3. the output is renamed into the partition: from here on every listing that sees it excludes what it replaces;
4. only after a grace period (``compact_grace``, so a reader that listed before step 3 has long finished opening
   its files) are the replaced files deleted, then the manifest, each step made durable before the next.

:func:`data_files` is the one listing every reader and the ingest use: every data file, minus those replaced by an
output that is there. Since a listing that sees an output reads its manifest by name, and the manifest was there
before the output was, no listing sees an output and misses a manifest that exists; one that finds the manifest
gone (step 4 done) lists again (:func:`_visible_names`). A manifest whose output is not there (a compaction that
died between steps 2 and 3) is ignored, and removed once a day old. An output is never compacted again while its
manifest is there (checked again under the lease before step 2), so manifests never chain.

Hand-written, not Delta Lake or Iceberg: both need their jars fetched from Maven at run time, and their table
formats would change how every reader (and the operators' own tools) open the catalog. The directory stays
plain Parquet partitioned by date; an outside reader sees duplicates until the replaced files are removed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass

from dataq.durable import sync_directory
from dataq.errors import ActionError

PARQUET_SUFFIX = ".parquet"
PARTITION_COLUMN = "ingest_date"
OUTPUT_PREFIX = "compact-"
MANIFEST_PREFIX = "_compact-"
MANIFEST_SUFFIX = ".json"
WORK_DIR = "_compacting"
"""Under the catalog root: where compaction's outputs are written before they are published."""
TEMP_SUFFIX = ".tmp"
WORK_DIR_MAX_AGE = 24 * 3600.0
"""Seconds after which a compaction's work directory counts as left by one that died (a rewrite takes minutes)."""
HIDDEN_PREFIXES = ("_", ".")
"""Spark's own rule: names starting with these are metadata or unfinished output, never data."""


class CatalogDamaged(ActionError):
    """A file of the catalog's own bookkeeping cannot be read; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a compaction's output replaces, and when it was published (seconds since the epoch, by the
    compactor's clock: a file's mtime on a network file system is the server's)."""

    replaced: frozenset[str]
    created: float


@dataclass(frozen=True, slots=True)
class DataFile:
    path: str
    size: int


def data_files(catalog: str) -> frozenset[str]:
    """The catalog's data files (absolute paths): every committed Parquet file but those a published compaction
    replaced. Empty when the catalog does not exist yet."""
    found: set[str] = set()
    for top, dirs, files in os.walk(catalog):
        dirs[:] = [d for d in dirs if not d.startswith(HIDDEN_PREFIXES)]
        found.update(os.path.join(top, name) for name in _visible_names(top, files))
    return frozenset(found)


def partition_dir(catalog: str, date: str) -> str:
    return os.path.join(catalog, f"{PARTITION_COLUMN}={date}")


def partitions(catalog: str) -> list[str]:
    """The dates (``YYYY-MM-DD``) of the catalog's partitions, oldest first."""
    try:
        names = os.listdir(catalog)
    except FileNotFoundError:
        return []
    prefix = f"{PARTITION_COLUMN}="
    return sorted(name[len(prefix):] for name in names if name.startswith(prefix))


def partition_files(catalog: str, date: str) -> list[DataFile]:
    """A partition's data files with their sizes, as :func:`data_files` sees them."""
    directory = partition_dir(catalog, date)
    try:
        names = _visible_names(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in sorted(names):
        with contextlib.suppress(FileNotFoundError):
            found.append(DataFile(os.path.join(directory, name), os.stat(os.path.join(directory, name)).st_size))
    return found


def pending_outputs(directory: str) -> set[str]:
    """Outputs (names) in a partition whose replaced files are not all gone yet: not to be compacted again."""
    return {_output_name(name) for name in _manifests(os.listdir(directory))}


def _visible_names(directory: str, names: Iterable[str] | None = None) -> set[str]:
    """The data files' names in ``directory`` (listed now unless ``names`` is a listing just taken).

    An output whose manifest is gone had its replaced files removed before the manifest; but a listing taken
    before that removal still names them. So a listing is used only once every output found without a manifest
    was already found so by an earlier pass, before this listing was taken.
    """
    known_gone: set[str] = set()
    while True:  # ends: each further pass found another output without a manifest, and outputs are few
        listed = list(os.listdir(directory) if names is None else names)
        data, gone = _visible(directory, listed)
        if gone <= known_gone:
            return data
        known_gone |= gone
        names = None


def _visible(directory: str, names: list[str]) -> tuple[set[str], set[str]]:
    """(data files, outputs without a manifest) of one listing."""
    data = {name for name in names if name.endswith(PARQUET_SUFFIX) and not name.startswith(HIDDEN_PREFIXES)}
    gone: set[str] = set()
    for output in data & {name for name in names if name.startswith(OUTPUT_PREFIX)}:
        manifest = _manifest(directory, output)
        if manifest is None:
            gone.add(output)
        else:
            data -= manifest.replaced
    return data, gone


def _manifest(directory: str, output: str) -> Manifest | None:
    """What ``output`` replaces; None once its manifest is gone (then so are the files it named)."""
    manifest = os.path.join(directory, _manifest_name(output))
    try:
        with open(manifest, encoding="utf-8") as source:
            body = json.load(source)
        replaced, created = body["replaced"], dt.datetime.fromisoformat(body["created"]).timestamp()
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # Written whole and renamed into place, so only outside damage gets here; guessing would show rows twice.
        raise CatalogDamaged(f"the catalog's compaction manifest {manifest} is unreadable ({exc}): if the files it "
                             f"lists are still in {directory}, remove {output}, which holds their rows; if they are "
                             "gone, remove the manifest") from exc
    if not isinstance(replaced, list) or not all(isinstance(name, str) for name in replaced):
        raise CatalogDamaged(f"the catalog's compaction manifest {manifest} does not list file names")
    return Manifest(frozenset(replaced), created)


def replaced_by(output: str) -> frozenset[str] | None:
    """The paths a published output replaced, while its manifest is there (None after)."""
    directory, name = os.path.split(output)
    manifest = _manifest(directory, name)
    return None if manifest is None else frozenset(os.path.join(directory, kept) for kept in manifest.replaced)


def _manifest_name(output: str) -> str:
    return MANIFEST_PREFIX + output[len(OUTPUT_PREFIX):-len(PARQUET_SUFFIX)] + MANIFEST_SUFFIX


def _output_name(manifest: str) -> str:
    return OUTPUT_PREFIX + manifest[len(MANIFEST_PREFIX):-len(MANIFEST_SUFFIX)] + PARQUET_SUFFIX


def _manifests(names: Iterable[str]) -> list[str]:
    return [name for name in names if name.startswith(MANIFEST_PREFIX) and name.endswith(MANIFEST_SUFFIX)]


# --- the writer's side (under the catalog lease) ---------------------------------------------------------------


def new_work_dir(catalog: str) -> tuple[str, str]:
    """(id, directory) for one compaction's output, under the catalog's hidden work directory."""
    token = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
    directory = os.path.join(catalog, WORK_DIR, token)
    os.makedirs(directory)
    return token, directory


def publish(directory: str, token: str, output: str, replaced: Iterable[str]) -> str:
    """Steps 2 and 3: the manifest naming ``replaced`` (paths in ``directory``), then ``output`` moved in as
    ``compact-<token>.parquet``. Returns the published path."""
    manifest = os.path.join(directory, MANIFEST_PREFIX + token + MANIFEST_SUFFIX)
    temp = f"{manifest}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    body = {"replaced": sorted(os.path.basename(path) for path in replaced),
            "created": dt.datetime.now(dt.UTC).isoformat()}
    with open(temp, "w", encoding="utf-8") as sink:
        json.dump(body, sink)
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(temp, manifest)
    sync_directory(directory)
    with open(output, "rb") as written:
        os.fsync(written.fileno())
    published = os.path.join(directory, OUTPUT_PREFIX + token + PARQUET_SUFFIX)
    os.replace(output, published)
    sync_directory(directory)
    if not os.path.exists(manifest):
        # Only a lease lost meanwhile lets another compactor remove it: without it the output would show its
        # rows twice, so it goes, and its inputs stand as they were.
        os.unlink(published)
        sync_directory(directory)
        raise CatalogDamaged(f"the manifest {manifest} vanished while its compaction was published (was the catalog "
                             "lease lost?); the compaction was undone")
    return published


def collect_garbage(catalog: str, grace: float, *, now: float | None = None) -> int:
    """Step 4 for every manifest older than ``grace`` seconds; manifests of outputs never published, and what
    compactions that died left in the work directory, go too. Returns how many replaced files were deleted.
    The caller holds the catalog lease: a manifest whose output is not there yet may be one being published."""
    now = time.time() if now is None else now
    deleted = 0
    for date in partitions(catalog):
        directory = partition_dir(catalog, date)
        with contextlib.suppress(FileNotFoundError):
            deleted += _collect_partition(directory, grace, now)
    work = os.path.join(catalog, WORK_DIR)
    for name in os.listdir(work) if os.path.isdir(work) else []:
        # A rewrite still running elsewhere holds no lease: only directories long left alone are dead ones.
        with contextlib.suppress(FileNotFoundError):
            if now - os.stat(os.path.join(work, name)).st_mtime > WORK_DIR_MAX_AGE:
                shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    return deleted


def garbage_due(catalog: str, grace: float, *, now: float | None = None) -> bool:
    """Whether some compaction's replaced files have outlived their grace period."""
    now = time.time() if now is None else now
    for date in partitions(catalog):
        directory = partition_dir(catalog, date)
        with contextlib.suppress(FileNotFoundError):
            for name in _manifests(os.listdir(directory)):
                manifest = _manifest(directory, _output_name(name))
                if manifest is not None and now - manifest.created >= grace:
                    return True
    return False


def _collect_partition(directory: str, grace: float, now: float) -> int:
    deleted = 0
    names = os.listdir(directory)
    for name in names:
        if name.startswith(MANIFEST_PREFIX) and name.endswith(TEMP_SUFFIX):  # a publication that died writing it
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
    pending = {_output_name(name) for name in _manifests(names)}
    for name in sorted(_manifests(names), key=lambda name: _created(directory, name)):  # oldest first
        output = _output_name(name)
        if not os.path.exists(os.path.join(directory, output)):
            # Never published (its compaction died), or being published by a compactor that lost the lease:
            # only an old one is surely dead.
            if now - _created(directory, name) < WORK_DIR_MAX_AGE:
                continue
        else:
            manifest = _manifest(directory, output)
            if manifest is None or now - manifest.created < grace:
                continue
            if manifest.replaced & pending:
                continue  # an output it replaced still hides files of its own: those go first
            for replaced in manifest.replaced:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, replaced))
                    deleted += 1
            sync_directory(directory)  # the files are gone for good before the manifest that hides them goes
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))
        pending.discard(output)
        sync_directory(directory)
    return deleted


def _created(directory: str, manifest: str) -> float:
    """When a manifest's compaction was published; its file's time when it cannot say."""
    try:
        found = _manifest(directory, _output_name(manifest))
    except CatalogDamaged:
        found = None
    if found is not None:
        return found.created
    try:
        return os.stat(os.path.join(directory, manifest)).st_mtime
    except FileNotFoundError:
        return float("inf")
