"""File helpers the storage and transfer actions share: checksums and a verified atomic copy (path templates are
in :mod:`.layout`).

Everything that reads or writes file data runs in a worker thread (``asyncio.to_thread``) so a large file never
stalls the pop daemon's event loop; a cancelled caller (an action timeout, shutdown) sets an abort flag that the
thread checks between chunks, so it stops soon and removes its temporary file instead of finishing unseen.

A stored file only ever appears under its final name complete, fsynced and verified: it is written to a hidden
temporary name in the target directory, fsynced, checked, then published with one atomic directory operation,
and the directory is fsynced. A crash at any point leaves either nothing or a hidden ``*.dataq-tmp`` file under
the final name's directory, never a half file under the final name.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import secrets
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dataq.checksum import CHUNK_BYTES, DEFAULT_ALGORITHM, Aborted, hash_fd, hash_file
from dataq.errors import ActionError, Permanent, Retryable
from dataq.record import Record

from .layout import UnsafePath, safe_parts

TEMP_SUFFIX = ".dataq-tmp"
"""Marks an unfinished copy; the leading dot hides it from ordinary listings."""
TEMP_TOKEN_BYTES = 4
"""Random bytes in a temporary name, so two attempts at one target never share a file."""
TEMP_NAME_KEEP = 100
"""Characters of the final name kept in a temporary name (a name may be 255 bytes; NAME_MAX must hold)."""
# Hard links make publishing no-clobber; these errors mean the filesystem has none, so rename is used instead.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK})
# A storage that went away or is full: an outage of the destination (an operator mounts or frees it), not a
# fault of the record, so such failures are Retryable and do not count toward max_errors.
_STORAGE_OUTAGES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ESTALE, errno.ENOTCONN, errno.EROFS,
                              errno.EHOSTDOWN, errno.EHOSTUNREACH, errno.ETIMEDOUT})
# What opening a directory component with O_NOFOLLOW reports for a symlink or a non-directory.
_NOT_A_PLAIN_DIR = frozenset({errno.ELOOP, errno.ENOTDIR})

T = TypeVar("T")


class SourceMismatch(Permanent):
    """The source file is missing or its size or checksum differs from its record."""


class CopyMismatch(Permanent):
    """The copy read back differs from the record (bad disk, memory or network); nothing was published."""


class StorageConflict(Permanent):
    """The target name already holds different data; it is left alone for an operator to look at."""


# --- checksums ----------------------------------------------------------------------------------------------


async def in_thread(func: Callable[[threading.Event], T]) -> T:
    """Run ``func(abort)`` in a worker thread; if the caller is cancelled, set ``abort`` so the thread stops too."""
    abort = threading.Event()
    try:
        return await asyncio.to_thread(func, abort)
    except asyncio.CancelledError:
        abort.set()
        raise


def matches(digest: str, record: Record) -> bool:
    # Hex is case-insensitive; a queue's checksum pattern may allow upper case.
    return digest.lower() == record.checksum.lower()


def check_source_sync(record: Record, algorithm: str, abort: threading.Event | None = None) -> None:
    """Raise SourceMismatch unless the record's file exists with the record's size and checksum."""
    try:
        size = os.stat(record.path).st_size
        if size != record.size:
            raise SourceMismatch(f"source file {record.path} has {size} bytes; its record says {record.size}")
        digest, read = hash_file(record.path, algorithm, abort)
    except FileNotFoundError as exc:
        raise SourceMismatch(f"source file {record.path} does not exist") from exc
    except OSError as exc:
        raise SourceMismatch(f"cannot read source file {record.path}: {exc.strerror or exc}") from exc
    _check_read(record, digest, read)


def _check_read(record: Record, digest: str, read: int) -> None:
    if read != record.size:
        raise SourceMismatch(f"source file {record.path} changed while read: {read} bytes, record says {record.size}")
    if not matches(digest, record):
        raise SourceMismatch(f"source file {record.path} has checksum {digest}; its record says {record.checksum}")


# --- verified atomic store ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stored:
    """Where a record's file is stored, and whether this call wrote it (False: it was already there)."""

    path: str
    copied: bool


def open_beneath(root: str, parts: tuple[str, ...]) -> int:
    """A descriptor of directory ``root/parts...``, created as needed, never following a symlink below ``root``.

    Walking one component at a time with O_NOFOLLOW (instead of resolving the path, then opening it) leaves no
    window in which a symlink swapped in could send the write elsewhere.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            try:
                os.mkdir(part, dir_fd=fd)
                os.fsync(fd)  # the new directory's entry must survive a crash, or so would not the file
            except FileExistsError:
                pass
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in _NOT_A_PLAIN_DIR:
                    raise UnsafePath(f"{part!r} under {root} is a symlink or not a directory; refusing") from exc
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


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


def _copy_into(dir_fd: int, temp: str, record: Record, algorithm: str, abort: threading.Event | None) -> None:
    """Copy the source into ``temp`` (created new), hashing what is read; SourceMismatch if it is not the record's."""
    try:
        source = os.open(record.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise SourceMismatch(f"source file {record.path} does not exist") from exc
    try:
        size = os.fstat(source).st_size
        if size != record.size:
            raise SourceMismatch(f"source file {record.path} has {size} bytes; its record says {record.size}")
        target = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        with open(target, "wb", closefd=True) as out:
            digest = hashlib.new(algorithm, usedforsecurity=False)
            read = 0
            while chunk := os.read(source, CHUNK_BYTES):
                if abort is not None and abort.is_set():
                    raise Aborted(f"copy of {record.path} aborted")
                digest.update(chunk)
                read += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
            # Drop the cached pages so the verification below reads what the disk holds, not our own buffers
            # (advice only: a filesystem may ignore it).
            with contextlib.suppress(OSError):
                os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(source)
    _check_read(record, digest.hexdigest(), read)


def _verify_copy(dir_fd: int, temp: str, shown: str, record: Record, algorithm: str,
                 abort: threading.Event | None) -> None:
    fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        digest, size = hash_fd(fd, algorithm, abort)
    finally:
        os.close(fd)
    if size != record.size or not matches(digest, record):
        raise CopyMismatch(f"copy of {record.path} to {shown} read back {size} bytes with checksum {digest}; "
                           f"the record says {record.size} bytes, {record.checksum}")


def _publish(dir_fd: int, temp: str, name: str) -> bool:
    """Give ``temp`` its final ``name`` atomically; False if ``name`` appeared meanwhile (``temp`` is kept)."""
    try:
        # A hard link never replaces an existing file (rename would), so a conflicting file is never clobbered.
        os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        if _lexists(dir_fd, name):
            return False
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return True
    os.unlink(temp, dir_fd=dir_fd)
    return True


def _lexists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _unlink_quietly(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def remove_source_sync(path: str) -> None:
    """Delete the source file and make that durable; a file already gone is fine (a retried record)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ActionError(f"cannot remove source file {path}: {exc.strerror or exc}") from exc
    try:
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ActionError(f"removed source file {path}, but cannot sync its directory: {exc.strerror}") from exc


def store_sync(record: Record, root: str, relative: str, *, algorithm: str = DEFAULT_ALGORITHM,
               verify: bool = True, remove_source: bool = False, abort: threading.Event | None = None) -> Stored:
    """Store the record's file at ``root/relative``, verified; see :func:`store`."""
    *dirs, name = safe_parts(relative)
    shown = os.path.join(root, relative)
    try:
        dir_fd = open_beneath(root, tuple(dirs))
    except FileNotFoundError as exc:
        if not os.path.isdir(root):  # unmounted, or removed: the storage is away, not the record wrong
            raise Retryable(f"storage root {root} does not exist", destination=root) from exc
        raise ActionError(f"a directory of {shown} does not exist") from exc
    except OSError as exc:
        raise _failure(exc, record, root, shown) from exc
    try:
        copied = not _existing(dir_fd, name, shown, record, algorithm, abort)
        if copied:
            _store_new(dir_fd, name, shown, record, algorithm, verify, abort)
        elif remove_source and os.path.lexists(record.path):
            # Already stored (a retry): the source may only go if it really is the data we hold.
            check_source_sync(record, algorithm, abort)
    except OSError as exc:
        raise _failure(exc, record, root, shown) from exc
    finally:
        os.close(dir_fd)
    if remove_source:
        remove_source_sync(record.path)
    return Stored(shown, copied)


def _failure(exc: OSError, record: Record, root: str, shown: str) -> ActionError:
    if exc.errno == errno.ENOSPC:
        return Retryable(f"no space left on the device of {shown} ({record.size} bytes to store)", destination=root)
    if exc.errno in _STORAGE_OUTAGES:
        return Retryable(f"cannot store {record.path} as {shown}: {exc.strerror or exc}", destination=root)
    return ActionError(f"cannot store {record.path} as {shown}: {exc.strerror or exc}")


def _store_new(dir_fd: int, name: str, shown: str, record: Record, algorithm: str, verify: bool,
               abort: threading.Event | None) -> None:
    temp = _temp_name(name)
    try:
        _copy_into(dir_fd, temp, record, algorithm, abort)
        if verify:
            _verify_copy(dir_fd, temp, shown, record, algorithm, abort)
        if not _publish(dir_fd, temp, name):
            # Another worker stored the same name meanwhile; it is fine only if it holds our data.
            _existing(dir_fd, name, shown, record, algorithm, abort)
        os.fsync(dir_fd)
    finally:
        _unlink_quietly(dir_fd, temp)
    _remove_stale_temps(dir_fd, name)


def _temp_name(name: str) -> str:
    return f".{name[:TEMP_NAME_KEEP]}.{secrets.token_hex(TEMP_TOKEN_BYTES)}{TEMP_SUFFIX}"


def _remove_stale_temps(dir_fd: int, name: str) -> None:
    """Delete what crashed copies of ``name`` left behind, now that ``name`` is stored.

    Only one worker runs a record at a time; should a worker presumed dead still be copying, losing its
    temporary file only makes its attempt fail, never a stored file wrong.
    """
    prefix, length = f".{name[:TEMP_NAME_KEEP]}.", len(_temp_name(name))
    for entry in os.listdir(dir_fd):
        if len(entry) == length and entry.startswith(prefix) and entry.endswith(TEMP_SUFFIX):
            _unlink_quietly(dir_fd, entry)


async def store(record: Record, root: str, relative: str, *, algorithm: str = DEFAULT_ALGORITHM,
                verify: bool = True, remove_source: bool = False) -> Stored:
    """Copy the record's file to ``root/relative`` unless it is already there, off the event loop.

    The source must have the record's size and checksum (SourceMismatch); the copy is written under a hidden
    temporary name, fsynced, read back and checked when ``verify`` (CopyMismatch), then published atomically
    without replacing anything, and the directory fsynced. A file already at the target with the record's
    data is a success without a copy; with other data it is a StorageConflict. ``remove_source`` deletes the
    source only once the stored copy is verified. Symlinks below ``root`` are refused (UnsafePath).
    """
    return await in_thread(lambda abort: store_sync(record, root, relative, algorithm=algorithm, verify=verify,
                                                    remove_source=remove_source, abort=abort))
