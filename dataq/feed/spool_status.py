"""What a spool holds, read beside the feeder that runs on it (WAL readers do not block it): ``dataq feed
--status``, and ``--retry-refused``."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dataq.errors import SpoolCorrupt, SpoolError
from dataq.feed.spool import DATABASE, LOCK, SCHEMA_VERSION, holder_pid, path_text, spool_error, wal_pragmas
from dataq.runtime.locks import held_lock_text

RECENT_REFUSALS = 20
"""Refused records ``--status`` lists in full."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Refusal:
    seq: int
    path: str
    checksum: str | None
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class SpoolStatus:
    """What ``dataq feed --status`` shows."""

    directory: str
    pending: int
    oldest_pending: float | None
    refused: int
    recent_refusals: list[Refusal]
    files_known: int
    bytes_on_disk: int
    notes: dict[str, Any] = field(default_factory=dict)
    held_by: int | None = None
    """The pid of the feeder running on this spool, None if none is."""


def held_by(directory: str) -> int | None:
    """The pid of the feeder holding the spool ``directory`` (-1 if it wrote none; None: nobody runs on it)."""
    text = held_lock_text(os.path.join(directory, LOCK))
    return None if text is None else holder_pid(text) or -1


def read_status(connection: sqlite3.Connection, directory: str, held_by: int | None) -> SpoolStatus:
    """The spool's status, read through ``connection`` (the feeder's own, or a reader's)."""
    pending, oldest = connection.execute(
        "SELECT count(*), min(added) FROM outbox WHERE refused IS NULL").fetchone()
    refused = connection.execute("SELECT count(*) FROM outbox WHERE refused IS NOT NULL").fetchone()[0]
    recent = [Refusal(seq, path_text(path), checksum, reason, at) for seq, path, checksum, reason, at in
              connection.execute("SELECT seq, path, checksum, refused, refused_at FROM outbox WHERE refused IS NOT "
                                 "NULL ORDER BY refused_at DESC LIMIT ?", (RECENT_REFUSALS,))]
    files = connection.execute("SELECT count(*) FROM files").fetchone()[0]
    notes = dict(connection.execute("SELECT key, value FROM notes").fetchall())
    size = 0
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            size += os.path.getsize(os.path.join(directory, DATABASE + suffix))
    return SpoolStatus(directory, pending, oldest, refused, recent, files, size, notes, held_by)


def read_spool_status(directory: str) -> SpoolStatus:
    """The status of the spool ``directory`` without taking its lock (its feeder may be running)."""
    directory = os.path.abspath(directory)
    holder = held_by(directory)
    return _with_spool(directory, lambda connection: read_status(connection, directory, holder),
                       being_created=SpoolStatus(directory, 0, None, 0, [], 0, 0, {}, holder))


def retry_refused(directory: str) -> int:
    """Make the refused records of the spool ``directory`` pending again (as new rows, so that a running feeder
    sends them too); how many there were."""
    def move(connection: sqlite3.Connection) -> int:
        cursor = connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            cursor.execute("INSERT INTO outbox (line, checksum, path, local, added) SELECT line, checksum, path, "
                           "local, added FROM outbox WHERE refused IS NOT NULL ORDER BY seq")
            cursor.execute("DELETE FROM outbox WHERE refused IS NOT NULL")
            count = cursor.rowcount
            cursor.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        return count

    return _with_spool(os.path.abspath(directory), move, being_created=0)


def _with_spool(directory: str, use: Callable[[sqlite3.Connection], T], *, being_created: T) -> T:
    """``use`` a connection to an existing spool, without its lock; ``being_created`` if the spool's database
    is still empty: a feeder that starts on a new spool creates the file first and its tables a moment later."""
    file = os.path.join(directory, DATABASE)
    if not os.path.exists(file):
        raise SpoolError(f"no spool in {directory} (no {DATABASE}): is that the feeder's --spool?")
    try:
        connection = sqlite3.connect(file, isolation_level=None)
        try:
            wal_pragmas(connection)
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version == 0 and connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
                return being_created
            if version != SCHEMA_VERSION:
                raise SpoolCorrupt(f"{file} is not a dataq spool")
            return use(connection)
        finally:
            connection.close()
    except (sqlite3.Error, OSError) as exc:
        raise spool_error(file, exc) from exc
