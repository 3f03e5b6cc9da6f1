"""Looking at a watched file: is it a regular file, does the spool know this version of it already, and what is its
checksum. Each look has one tagged outcome (:class:`Examined`), which the intake matches on.

A file that changes while it is read is passed over for now (its writer's close, or the next scan, brings it
back). A file that had settled before it was read gets its identity (:mod:`dataq.file_identity`), so that the
actions need not read it again to prove the checksum.
"""

from __future__ import annotations

import enum
import os
import stat
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from dataq.checksum import LARGE_FILE_BYTES, hash_fd
from dataq.feed.spool import FileKey
from dataq.file_identity import Identity, settled
from dataq.logs import get_logger

log = get_logger()


class Look(enum.Enum):
    """What looking at a file found."""

    HASHED = "hashed"
    """Its checksum (and its identity, if it had settled)."""
    KNOWN = "known"
    """The spool has taken this version of the file already: nothing to send."""
    LARGE = "large"
    """Large: to be hashed on threads of its own, so that small files do not wait behind it."""
    PASSED = "passed"
    """Not a regular file, or changed while it was read: nothing to do now."""
    FAILED = "failed"
    """It could not be looked at (``error`` says why): this file only."""


class Examined(NamedTuple):
    """One look's outcome: its :class:`Look`, the file's key (all but passed and failed), its checksum and
    identity (hashed), or the error (failed). A tuple: one is made per file of a burst, and a tuple is the
    cheapest object to make."""

    look: Look
    key: FileKey | None = None
    checksum: str = ""
    identity: Identity | None = None
    error: OSError | ValueError | None = None


PASSED = Examined(Look.PASSED)

Known = Callable[[FileKey], bool]
"""Whether the intake has this version of a file already (in the spool, or hashed and on its way there)."""


def examine_all(paths: list[str], known: Known, algorithm: str, abort: threading.Event, *,
                small: int = LARGE_FILE_BYTES, until: float | None = None) -> list[Examined]:
    """:func:`examine` of each path (files of ``small`` bytes or more are only looked at), in order, the first
    always and the others until ``until`` (monotonic); what failed for a file is its own outcome."""
    outcomes: list[Examined] = []
    for path in paths:
        if outcomes and until is not None and time.monotonic() > until:
            break
        try:
            outcomes.append(examine(path, known, algorithm, abort, small))
        except (OSError, ValueError) as exc:
            outcomes.append(Examined(Look.FAILED, error=exc))
    return outcomes


def examine(path: str, known: Known, algorithm: str, abort: threading.Event, small: int) -> Examined:
    """Look at the file at ``path``; one of ``small`` bytes or more is only looked at (:attr:`Look.LARGE`)."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        return PASSED
    key = FileKey.of(path, info)
    if known(key):
        return Examined(Look.KNOWN, key)
    if key.size >= small:
        return Examined(Look.LARGE, key)
    return hash_file(path, key, algorithm, abort)


def hash_file(path: str, key: FileKey, algorithm: str, abort: threading.Event) -> Examined:
    """The checksum of the file at ``path`` if it is still the version ``key`` once read (:attr:`Look.PASSED`
    if not: its writer's close brings it back)."""
    hashed = _hash_unchanged(path, key, algorithm, abort)
    if hashed is None:
        log.debug("file changed while it was read; waiting for its writer", path=path)
        return PASSED
    checksum, identity = hashed
    return Examined(Look.HASHED, key, checksum, identity)


def _hash_unchanged(path: str, key: FileKey, algorithm: str,
                    abort: threading.Event) -> tuple[str, Identity | None] | None:
    """The checksum of the file at ``path`` if it is still the version ``key`` after reading it, else None; with
    the file's identity if it had settled before the read (:func:`dataq.file_identity.settled`)."""
    # O_NONBLOCK: a FIFO put in the file's place must not hang the open (it then fails the key check below).
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        started = time.time_ns()
        if FileKey.of(path, os.fstat(fd)) != key:
            return None
        checksum, size = hash_fd(fd, algorithm, abort)
        read = os.fstat(fd)
        if size != key.size or FileKey.of(path, read) != key:
            return None
    finally:
        os.close(fd)
    try:
        after = os.lstat(path)
    except FileNotFoundError:
        return checksum, None  # read whole; its removal is the forwarder's to notice
    if FileKey.of(path, after) != key:
        return None
    # The identity the path has now (lstat, not the descriptor's: a file renamed over it since is another file).
    return checksum, settled(after, started) if (after.st_dev, after.st_ino) == (read.st_dev, read.st_ino) else None
