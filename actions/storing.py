"""The verified atomic store of ``disk_store``: records' files copied beneath a root, a batch at a time.

A stored file only ever appears under its final name complete, durable and verified: it is written to a hidden
temporary name in the target directory, made durable, read back and checked, then published with one atomic
directory operation, and the directory made durable. A crash at any point leaves either nothing or a hidden
``*.dataq-tmp`` file under the final name's directory, never a half file under the final name.

Durability is per batch, not per file: the batch's copies are all written, then one ``syncfs(2)`` of the root's
filesystem makes them durable together (one journal commit instead of one per file), and a second one after
publishing makes the new names durable. Where ``syncfs`` is missing (not Linux), each file and directory is
fsynced instead. ``syncfs`` reports a write-back error of the filesystem since the root was opened, so an error
it returns fails every copy of the batch, which then run again.

Every copy stored (or found stored) is named in the root's manifest of the day (:mod:`dataq.audit.manifest`)
before that second sync, so it is durable with the names, before any record of the batch is done.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from dataq.audit import manifest
from dataq.checksum import CHUNK_BYTES, DEFAULT_ALGORITHM, IDENTITY_ALGORITHM, Aborted, hash_fd, new_hasher
from dataq.errors import ActionError, Retryable
from dataq.record import Record

from .beneath import SYNCFS, open_beneath, publish, sync_filesystem, unlink_quietly
from .files import (
    CopyMismatch,
    SourceMismatch,
    StorageConflict,
    check_read,
    check_source_sync,
    in_thread,
    matches,
    remove_sources_sync,
    unchanged_since_fed,
)
from .layout import UnsafePath, safe_parts

TEMP_SUFFIX = ".dataq-tmp"
"""Marks an unfinished copy; the leading dot hides it from ordinary listings."""
TEMP_TOKEN_BYTES = 4
"""Random bytes in a temporary name, so two attempts at one target never share a file."""
TEMP_NAME_KEEP = 100
"""Characters of the final name kept in a temporary name (a name may be 255 bytes; NAME_MAX must hold)."""
READ_TOGETHER_BYTES = CHUNK_BYTES
"""Copies this small are asked back from the disk together before they are read back (``POSIX_FADV_WILLNEED``):
each is one read, which the kernel's readahead cannot start early, so the read-back's threads waited on the disk
one read at a time each (measured on 1,000 copies of 20 KB: 0.30-0.37 s, against 0.18-0.26 s asked together).
A larger file is read in order, and readahead keeps ahead of that."""
# A storage that went away or is full: an outage of the destination (an operator mounts or frees it), not a
# fault of the record, so such failures are Retryable and do not count toward max_errors.
_STORAGE_OUTAGES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ESTALE, errno.ENOTCONN, errno.EROFS,
                              errno.EHOSTDOWN, errno.EHOSTUNREACH, errno.ETIMEDOUT})


@dataclass(frozen=True, slots=True)
class Stored:
    """Where a record's file is stored, and whether this call wrote it (False: it was already there)."""

    path: str
    copied: bool


@dataclass(slots=True)
class _Copy:
    index: int
    record: Record
    dir_fd: int
    name: str
    shown: str
    temp: str
    written: str = ""
    """The :data:`~dataq.checksum.IDENTITY_ALGORITHM` digest of the bytes copied (which matched the record's
    checksum as they were read): the copy read back must have it."""


def _existing(dir_fd: int, name: str, shown: str, record: Record, algorithm: str,
              abort: threading.Event | None) -> bool:
    """True if ``name`` already holds the record's data; False if absent; StorageConflict/UnsafePath otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(f"{shown} is a symlink; refusing to use it") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StorageConflict(f"{shown} exists and is not a regular file")
        if info.st_size != record.size:
            raise StorageConflict(f"{shown} exists with {info.st_size} bytes; record {record.id} has {record.size}")
        digest, _ = hash_fd(fd, algorithm, abort)
    finally:
        os.close(fd)
    if not matches(digest, record):
        raise StorageConflict(f"{shown} exists with checksum {digest}, not the record's {record.checksum}")
    return True


def _copy_into(copy: _Copy, algorithm: str, abort: threading.Event | None, trust_identity: bool) -> None:
    """Copy the source into the copy's temporary file (created new), hashing what is read with the record's
    algorithm and with the fast identity hash (for the read-back, ~40 times md5's speed); SourceMismatch if it
    is not the record's. With ``trust_identity``, a source :func:`unchanged_since_fed` before and after the copy
    is the record's without its algorithm's hash. Without ``syncfs`` the file is fsynced here."""
    record = copy.record
    try:
        source = os.open(record.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise SourceMismatch(f"source file {record.path} does not exist") from exc
    try:
        info = os.fstat(source)
        if info.st_size != record.size:
            raise SourceMismatch(f"source file {record.path} has {info.st_size} bytes; its record says {record.size}")
        trusted = trust_identity and unchanged_since_fed(record, info)
        digests = {name: new_hasher(name) for name in (IDENTITY_ALGORITHM, *(() if trusted else (algorithm,)))}
        target = os.open(copy.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=copy.dir_fd)
        with open(target, "wb", closefd=True) as out:
            read = 0
            while chunk := os.read(source, CHUNK_BYTES):
                if abort is not None and abort.is_set():
                    raise Aborted(f"copy of {record.path} aborted")
                for digest in digests.values():
                    digest.update(chunk)
                read += len(chunk)
                out.write(chunk)
            out.flush()
            if SYNCFS is None:
                os.fsync(out.fileno())
        # A write while it was copied would have changed the file's identity.
        unchanged = trusted and unchanged_since_fed(record, os.fstat(source))
    finally:
        os.close(source)
    if algorithm in digests:
        check_read(record, digests[algorithm].hexdigest(), read)
    elif not unchanged or read != record.size:
        raise SourceMismatch(f"source file {record.path} changed while it was copied")
    copy.written = digests[IDENTITY_ALGORITHM].hexdigest()


def _read_from_disk(copies: Sequence[_Copy]) -> None:
    """Drop the cached pages of durable copies (clean since the sync), so that reading them back reads what the
    disk holds, not our own buffers; then ask the disk for the small ones all at once (advice only: a filesystem
    may ignore it, and a copy that cannot be opened here fails its read-back)."""
    for copy in copies:
        try:
            fd = os.open(copy.temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=copy.dir_fd)
        except OSError:
            continue
        try:
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                if copy.record.size <= READ_TOGETHER_BYTES:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def _verify_copy(copy: _Copy, abort: threading.Event | None) -> None:
    """Read the durable copy back from the disk (:func:`_read_from_disk` dropped its cached pages): it must hold
    the bytes copied (the identity hash says so; the record's checksum, or the source's identity unchanged since
    its feeder hashed it, vouched for those bytes as they were read)."""
    fd = os.open(copy.temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=copy.dir_fd)
    try:
        digest, size = hash_fd(fd, IDENTITY_ALGORITHM, abort)
    finally:
        os.close(fd)
    record = copy.record
    if size != record.size or digest != copy.written:
        raise CopyMismatch(f"copy of {record.path} to {copy.shown} read back {size} bytes with {IDENTITY_ALGORITHM} "
                           f"{digest}; {record.size} bytes with {IDENTITY_ALGORITHM} {copy.written} were written "
                           f"(record {record.checksum})")


def _failure(exc: OSError, record: Record, root: str, shown: str) -> ActionError:
    if exc.errno == errno.ENOSPC:
        return Retryable(f"no space left on the device of {shown} ({record.size} bytes to store)", destination=root)
    if exc.errno in _STORAGE_OUTAGES:
        return Retryable(f"cannot store {record.path} as {shown}: {exc.strerror or exc}", destination=root)
    return ActionError(f"cannot store {record.path} as {shown}: {exc.strerror or exc}")


def _temp_name(name: str) -> str:
    return f".{name[:TEMP_NAME_KEEP]}.{secrets.token_hex(TEMP_TOKEN_BYTES)}{TEMP_SUFFIX}"


def _remove_stale_temps(dir_fd: int, names: set[str]) -> None:
    """Delete what crashed copies of ``names`` left behind, now that they are stored.

    Only one worker runs a record at a time; should a worker presumed dead still be copying, losing its
    temporary file only makes its attempt fail, never a stored file wrong.
    """
    kept = {name[:TEMP_NAME_KEEP] for name in names}
    token_and_suffix = 1 + 2 * TEMP_TOKEN_BYTES + len(TEMP_SUFFIX)  # ".<hex token>.dataq-tmp"
    for entry in os.listdir(dir_fd):
        if entry.startswith(".") and entry.endswith(TEMP_SUFFIX) and len(entry) > token_and_suffix + 1 \
                and entry[-token_and_suffix] == "." and entry[1:-token_and_suffix] in kept:
            unlink_quietly(dir_fd, entry)


class _Batch:
    """One call of :func:`store_batch_sync`: the directories it opened and the copies it made."""

    def __init__(self, root: str, algorithm: str, abort: threading.Event | None, trust_identity: bool) -> None:
        self.root, self.algorithm, self.abort, self.trust_identity = root, algorithm, abort, trust_identity
        self.dirs: dict[tuple[str, ...], int] = {}
        self.dirs_lock = threading.Lock()
        self.copies: list[_Copy] = []
        self.outcomes: dict[int, Stored | ActionError] = {}
        self.found: list[tuple[int, str]] = []
        """(directory, name) of each file found stored already: a crashed attempt may have left a copy beside it."""

    def directory(self, parts: tuple[str, ...], shown: str) -> int:
        with self.dirs_lock:
            return self._directory(parts, shown)

    def _directory(self, parts: tuple[str, ...], shown: str) -> int:
        fd = self.dirs.get(parts)
        if fd is None:
            try:
                fd = self.dirs[parts] = open_beneath(self.root, parts, sync_new=SYNCFS is None)
            except FileNotFoundError as exc:
                if not os.path.isdir(self.root):  # unmounted, or removed: the storage is away, not the record wrong
                    raise Retryable(f"storage root {self.root} does not exist", destination=self.root) from exc
                raise ActionError(f"a directory of {shown} does not exist") from exc
        return fd

    def start(self, index: int, record: Record, relative: str, remove_source: bool) -> None:
        """Copy one record's file to its temporary name (or find it stored already)."""
        *dirs, name = safe_parts(relative)
        shown = os.path.join(self.root, relative)
        if (dirs[0] if dirs else name) == manifest.OWN_DIR:
            raise UnsafePath(f"{shown} is in {manifest.OWN_DIR}, the folder of the root that dataq keeps for itself")
        try:
            dir_fd = self.directory(tuple(dirs), shown)
            if _existing(dir_fd, name, shown, record, self.algorithm, self.abort):
                if remove_source and os.path.lexists(record.path):
                    # Already stored (a retry): the source may only go if it really is the data we hold.
                    check_source_sync(record, self.algorithm, self.abort, trust_identity=self.trust_identity)
                self.outcomes[index] = Stored(shown, False)
                if len(name) < TEMP_NAME_KEEP:
                    # A temporary name holds a long name cut short: it could then be another record's copy in
                    # progress, which only a copy of our own (made just now, below) may clear.
                    self.found.append((dir_fd, name))
                return
            copy = _Copy(index, record, dir_fd, name, shown, _temp_name(name))
            self.copies.append(copy)
            _copy_into(copy, self.algorithm, self.abort, self.trust_identity)
        except OSError as exc:
            raise _failure(exc, record, self.root, shown) from exc

    def make_durable(self, what: Sequence[_Copy], *, names: bool) -> OSError | None:
        """Sync the filesystem (or, without syncfs, the copies' directories once published); on failure every
        copy in ``what`` fails, and the error is returned."""
        if not what:
            return None
        try:
            if SYNCFS is not None:
                for dir_fd in {os.fstat(copy.dir_fd).st_dev: copy.dir_fd for copy in what}.values():
                    sync_filesystem(dir_fd)
            elif names:
                for dir_fd in {copy.dir_fd for copy in what}:
                    os.fsync(dir_fd)
        except OSError as exc:
            for copy in what:
                self.outcomes[copy.index] = _failure(exc, copy.record, self.root, copy.shown)
            return exc
        return None

    def covers_manifest(self, copies: Sequence[_Copy]) -> bool:
        """Whether a sync of the filesystems of ``copies`` makes the root's manifest durable too: there are copies,
        and all are on the root's filesystem (a folder of the layout may be another mount)."""
        if SYNCFS is None or not copies:
            return False
        root = os.stat(self.root).st_dev
        return all(os.fstat(copy.dir_fd).st_dev == root for copy in copies)

    def fail_stored(self, items: Sequence[tuple[Record, str]], exc: OSError) -> None:
        """Every record still stored fails: the sync its manifest line relied on failed."""
        for index, outcome in list(self.outcomes.items()):
            if isinstance(outcome, Stored):
                record, relative = items[index]
                self.outcomes[index] = _failure(exc, record, self.root, os.path.join(self.root, relative))

    def finish(self, copy: _Copy, verify: bool) -> None:
        """Check one durable copy and publish it."""
        try:
            if verify:
                _verify_copy(copy, self.abort)
            if not publish(copy.dir_fd, copy.temp, copy.name):
                # Another worker stored the same name meanwhile; it is fine only if it holds our data.
                _existing(copy.dir_fd, copy.name, copy.shown, copy.record, self.algorithm, self.abort)
        except OSError as exc:
            raise _failure(exc, copy.record, self.root, copy.shown) from exc
        self.outcomes[copy.index] = Stored(copy.shown, True)

    def name_in_manifest(self, items: Sequence[tuple[Record, str]], *, synced_after: bool) -> None:
        """Append every stored copy to the root's manifest; fsync it unless a sync of the filesystem follows
        (``synced_after``). On failure every stored copy fails: it must not be done unnamed."""
        stored = [index for index, outcome in self.outcomes.items() if isinstance(outcome, Stored)]
        entries = [manifest.Entry(items[index][0].checksum, items[index][1], items[index][0].size) for index in stored]
        try:
            manifest.append(self.root, self.algorithm, entries, sync=not synced_after)
        except OSError as exc:
            for index in stored:
                record, _relative = items[index]
                self.outcomes[index] = _failure(exc, record, self.root, os.path.join(self.root, manifest.MANIFEST_DIR))

    def close(self) -> None:
        for copy in self.copies:
            unlink_quietly(copy.dir_fd, copy.temp)
        by_dir: dict[int, set[str]] = {}
        stored = [(copy.dir_fd, copy.name) for copy in self.copies if isinstance(self.outcomes.get(copy.index), Stored)]
        for dir_fd, name in stored + self.found:
            by_dir.setdefault(dir_fd, set()).add(name)
        for dir_fd, names in by_dir.items():
            with contextlib.suppress(OSError):
                _remove_stale_temps(dir_fd, names)
        for fd in self.dirs.values():
            os.close(fd)


def _attempt(outcomes: dict[int, Stored | ActionError], index: int, step: Callable[..., None], *args: Any) -> None:
    """Run one record's step; an ActionError becomes that record's outcome (Aborted stops the batch)."""
    try:
        step(*args)
    except ActionError as exc:
        outcomes[index] = exc


def _in_parallel(calls: list[Callable[[], None]]) -> None:
    """Run ``calls`` on as many threads as there are CPUs (copying and hashing release the GIL), re-raising the
    first exception (Aborted) once all have ended."""
    workers = min(len(calls), os.cpu_count() or 1)
    if workers <= 1:
        for call in calls:
            call()
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="dataq-store") as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()


def store_batch_sync(items: Sequence[tuple[Record, str]], root: str, *, algorithm: str = DEFAULT_ALGORITHM,
                     verify: bool = True, remove_source: bool = False, abort: threading.Event | None = None,
                     trust_identity: bool = False, keep_manifest: bool = True) -> list[Stored | ActionError]:
    """Store each record's file at ``root/relative``, verified; per item the outcome (see :func:`store`).
    ``trust_identity``: a source unchanged since its feeder hashed it is not hashed again
    (:func:`.files.read_source_sync`); ``keep_manifest``: name each copy in the root's manifest.

    One record's failure is its own; Aborted (``abort`` set) stops the whole batch, leaving nothing behind.
    """
    batch = _Batch(root, algorithm, abort, trust_identity)
    try:
        _in_parallel([partial(_attempt, batch.outcomes, index, batch.start, index, record, relative, remove_source)
                      for index, (record, relative) in enumerate(items)])
        written = [copy for copy in batch.copies if copy.index not in batch.outcomes]
        batch.make_durable(written, names=False)
        durable = [copy for copy in written if copy.index not in batch.outcomes]
        if verify:
            _read_from_disk(durable)
        _in_parallel([partial(_attempt, batch.outcomes, copy.index, batch.finish, copy, verify) for copy in durable])
        published = [copy for copy in written if isinstance(batch.outcomes[copy.index], Stored)]
        covered = keep_manifest and batch.covers_manifest(published)
        if keep_manifest:
            batch.name_in_manifest(items, synced_after=covered)
        failed = batch.make_durable([copy for copy in published if isinstance(batch.outcomes[copy.index], Stored)],
                                    names=True)
        if failed is not None and covered:
            # The manifest's lines of the copies found stored (a retry) relied on that sync too.
            batch.fail_stored(items, failed)
    finally:
        batch.close()
    outcomes = [batch.outcomes[index] for index in range(len(items))]
    if remove_source:
        stored = [index for index, outcome in enumerate(outcomes) if isinstance(outcome, Stored)]
        for index, error in zip(stored, remove_sources_sync([items[index][0].path for index in stored]), strict=True):
            if error is not None:
                outcomes[index] = error
    return outcomes


def store_sync(record: Record, root: str, relative: str, *, algorithm: str = DEFAULT_ALGORITHM,
               verify: bool = True, remove_source: bool = False, abort: threading.Event | None = None) -> Stored:
    """Store one record's file at ``root/relative``, verified; see :func:`store`."""
    (outcome,) = store_batch_sync([(record, relative)], root, algorithm=algorithm, verify=verify,
                                  remove_source=remove_source, abort=abort)
    if isinstance(outcome, ActionError):
        raise outcome
    return outcome


async def store(record: Record, root: str, relative: str, *, algorithm: str = DEFAULT_ALGORITHM,
                verify: bool = True, remove_source: bool = False) -> Stored:
    """Copy the record's file to ``root/relative`` unless it is already there, off the event loop.

    The source must have the record's size and checksum (SourceMismatch); the copy is written under a hidden
    temporary name, made durable, read back and checked when ``verify`` (CopyMismatch), then published
    atomically without replacing anything, and the name made durable. A file already at the target with the
    record's data is a success without a copy; with other data it is a StorageConflict. ``remove_source``
    deletes the source only once the stored copy is verified. Symlinks below ``root`` are refused (UnsafePath).
    """
    return await in_thread(lambda abort: store_sync(record, root, relative, algorithm=algorithm, verify=verify,
                                                    remove_source=remove_source, abort=abort))
