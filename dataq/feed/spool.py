"""The feeder's spool: every record kept on disk from before it is sent until a push daemon has answered for it.

The spool is SQLite from Python's standard library, in WAL mode with ``synchronous=FULL``: a transaction is on
disk (fsynced) when its commit returns, a kill -9 at any moment loses nothing, and ``dataq feed --status`` reads
it while the feeder writes (WAL readers do not block the writer). A spool is a directory holding the database
(:data:`DATABASE`) and a lock file (:data:`LOCK`) that one feeder holds for as long as it runs, so two feeders
never send the same spool twice.

Tables (``PRAGMA user_version`` = :data:`SCHEMA_VERSION`):

``outbox``
    One row per record to send, in the order taken in (``seq``). A row leaves when its push daemon answers
    ``Pushed`` or ``Ignored``; an ``Error:`` reply stays, with its reason in ``refused``, and is not sent again
    (``dataq feed --retry-refused`` makes it pending again). ``local`` marks records of files this host
    watches: one whose file is gone before it is sent is dropped with a warning.
``files``
    (path, size, mtime, inode) -> checksum of every watched file taken in, so that a restart neither hashes nor
    sends again a file it has already taken; rows of files no longer there are removed by the scan at start.
``notes``
    The link's history for ``--status``: last success, last error, since when the push daemons are unreachable.

Every write runs on the spool's own thread (SQLite connections are not shared between threads); the async
methods hand it the work. :meth:`Spool.known_here` asks whether a file is known from any thread, on that
thread's own read connection: WAL readers never wait for the writer, so intake does not queue behind fsynced
commits. Errors become :class:`~dataq.errors.SpoolError`: a full disk :class:`SpoolFull`, a
damaged file :class:`SpoolCorrupt`, both naming the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

from dataq.errors import SpoolBusy, SpoolCorrupt, SpoolError, SpoolFull
from dataq.runtime.locks import try_lock, write_holder

DATABASE = "spool.sqlite"
LOCK = "lock"
SCHEMA_VERSION = 1
HOLDING_CHUNK = 500
"""Checksums one look-up names (SQLite's limit on parameters is 999 in older builds)."""
BUSY_TIMEOUT_MS = 10_000
"""How long a statement waits for another connection's lock (a ``--status`` reader checkpointing)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    line BLOB NOT NULL,
    checksum TEXT,
    path BLOB NOT NULL,
    local INTEGER NOT NULL,
    added REAL NOT NULL,
    refused TEXT,
    refused_at REAL
);
CREATE INDEX IF NOT EXISTS outbox_refused ON outbox (refused_at) WHERE refused IS NOT NULL;
CREATE TABLE IF NOT EXISTS files (
    path BLOB PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    checksum TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS notes (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
"""

T = TypeVar("T")


class FileKey(NamedTuple):
    """What identifies one version of a watched file: if all four match, its checksum is known."""

    path: str
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: str, stat: os.stat_result) -> FileKey:
        return cls(path, stat.st_size, stat.st_mtime_ns, stat.st_ino)


class Entry(NamedTuple):
    """A record to take in: its wire line (with its newline), id, path, and the watched file it is made of."""

    line: bytes
    checksum: str | None
    path: str
    file: FileKey | None = None


class Pending(NamedTuple):
    """A record in the outbox waiting to be sent."""

    seq: int
    line: bytes
    path: str
    local: bool


def wal_pragmas(connection: sqlite3.Connection) -> None:
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    connection.execute("PRAGMA journal_mode = WAL")
    # FULL: a commit is fsynced before it returns, so a record is on disk before it is sent.
    connection.execute("PRAGMA synchronous = FULL")


class Spool:
    """One spool directory, opened by the feeder that sends it (see the module's docstring)."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.file = os.path.join(self.directory, DATABASE)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="dataq-spool")
        self._connection: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._readers = threading.local()
        self._reader_connections: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    # -- opening and closing -----------------------------------------------------------------------------------

    async def open(self) -> Spool:
        """Create the directory and database if need be, take the lock, check the schema."""
        await self._run(self._open)
        return self

    def _open(self) -> None:
        try:
            os.makedirs(self.directory, mode=0o750, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"cannot create the spool directory {self.directory}: {exc.strerror or exc}") from exc
        self._lock_fd = _take_lock(self.directory)
        connection = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False)
        self._connection = connection
        wal_pragmas(connection)
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise SpoolCorrupt(f"{self.file} is a spool of another version ({version}; this dataq reads "
                               f"{SCHEMA_VERSION})")
        if version == 0:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables - {"outbox", "files", "notes", "sqlite_sequence"}:
                raise SpoolCorrupt(f"{self.file} is an SQLite database but not a dataq spool "
                                   f"(tables {', '.join(sorted(tables))})")
            # executescript commits on its own: the script is its own transaction.
            connection.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")

    async def close(self) -> None:
        with contextlib.suppress(SpoolError):
            await self._run(self._close)
        self._executor.shutdown(wait=False)

    def _close(self) -> None:
        with self._readers_lock:
            for reader in self._reader_connections:
                reader.close()
            self._reader_connections.clear()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- taking in ----------------------------------------------------------------------------------------------

    async def add(self, entries: Sequence[Entry]) -> None:
        """Keep ``entries`` durably (one fsynced transaction); their files become known."""
        await self._run(self._add, entries, time.time())

    def _add(self, entries: Sequence[Entry], now: float) -> None:
        with self._transaction() as cursor:
            cursor.executemany(
                "INSERT INTO outbox (line, checksum, path, local, added) VALUES (?, ?, ?, ?, ?)",
                [(entry.line, entry.checksum, path_blob(entry.path), entry.file is not None, now)
                 for entry in entries])
            cursor.executemany(
                "INSERT OR REPLACE INTO files (path, size, mtime_ns, inode, checksum) VALUES (?, ?, ?, ?, ?)",
                [(path_blob(entry.file.path), *entry.file[1:], entry.checksum) for entry in entries
                 if entry.file is not None])

    def known_here(self, key: FileKey) -> bool:
        """Whether this version of the file was taken in already. It blocks (briefly: WAL readers do not wait for
        the writer), on the asking thread's own read connection."""
        connection: sqlite3.Connection | None = getattr(self._readers, "connection", None)
        try:
            if connection is None:
                connection = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False)
                connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                self._readers.connection = connection
                with self._readers_lock:
                    self._reader_connections.append(connection)
            row = connection.execute("SELECT 1 FROM files WHERE path = ? AND size = ? AND mtime_ns = ? AND inode = ?",
                                     (path_blob(key.path), *key[1:])).fetchone()
        except sqlite3.Error as exc:
            raise spool_error(self.file, exc) from exc
        return row is not None

    async def forget_files_except(self, root: str, present: Iterable[str]) -> int:
        """Forget the files under ``root`` that are not in ``present`` (a scan's listing); how many were."""
        return await self._run(self._forget_files_except, root, set(present))

    def _forget_files_except(self, root: str, present: set[str]) -> int:
        prefix = path_blob(root.rstrip("/") + "/")
        rows = self._db().execute("SELECT path FROM files WHERE substr(path, 1, ?) = ?",
                                  (len(prefix), prefix)).fetchall()
        # Not listed and not there now: a file taken in since the listing was made is kept.
        gone = [(path,) for (path,) in rows
                if (name := path_text(path)) not in present and not os.path.lexists(name)]
        if gone:
            with self._transaction() as cursor:
                cursor.executemany("DELETE FROM files WHERE path = ?", gone)
        return len(gone)

    # -- sending ------------------------------------------------------------------------------------------------

    async def pending(self, after: int, limit: int) -> list[Pending]:
        """Up to ``limit`` records waiting to be sent, of sequence numbers above ``after``, in order."""
        return await self._run(self._pending, after, limit)

    def _pending(self, after: int, limit: int) -> list[Pending]:
        rows = self._db().execute("SELECT seq, line, path, local FROM outbox WHERE seq > ? AND refused IS NULL "
                                  "ORDER BY seq LIMIT ?", (after, limit)).fetchall()
        return [Pending(seq, bytes(line), path_text(path), bool(local)) for seq, line, path, local in rows]

    async def holding(self, checksums: Sequence[str]) -> set[str]:
        """Those of ``checksums`` whose records the outbox holds (waiting to be sent, or refused)."""
        return await self._run(self._holding, list(checksums))

    def _holding(self, checksums: list[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(checksums), HOLDING_CHUNK):
            chunk = checksums[start:start + HOLDING_CHUNK]
            rows = self._db().execute(f"SELECT checksum FROM outbox WHERE checksum IN ({','.join('?' * len(chunk))})",
                                      chunk).fetchall()
            found.update(row[0] for row in rows)
        return found

    async def resolve(self, done: Sequence[int], refused: Sequence[tuple[int, str]]) -> None:
        """Take answered records out (``done``) and keep refused ones with their reasons, in one transaction."""
        await self._run(self._resolve, done, refused, time.time())

    def _resolve(self, done: Sequence[int], refused: Sequence[tuple[int, str]], now: float) -> None:
        with self._transaction() as cursor:
            cursor.executemany("DELETE FROM outbox WHERE seq = ?", [(seq,) for seq in done])
            # Counted as taken out, not as given: answers resolved again (a resolution whose caller was cancelled
            # while it ran, then retried) count once.
            taken = cursor.rowcount if done else 0
            cursor.executemany("UPDATE outbox SET refused = ?, refused_at = ? WHERE seq = ?",
                               [(reason, now, seq) for seq, reason in refused])
            if done:
                _set_notes(cursor, last_success=now)
            if taken:
                cursor.execute("INSERT INTO notes (key, value) VALUES ('answered', ?) "
                               "ON CONFLICT (key) DO UPDATE SET value = value + excluded.value", (taken,))
            if refused:
                _set_notes(cursor, last_refusal=now)

    async def drop(self, seqs: Sequence[int]) -> None:
        """Remove records that will never be sent (their files vanished)."""
        await self._run(self._drop, seqs)

    def _drop(self, seqs: Sequence[int]) -> None:
        with self._transaction() as cursor:
            cursor.executemany("DELETE FROM outbox WHERE seq = ?", [(seq,) for seq in seqs])

    async def note(self, **values: Any) -> None:
        """Remember facts about the link (``last_error``, ``outage_since``...) for ``--status``."""
        await self._run(self._note, values)

    def _note(self, values: dict[str, Any]) -> None:
        with self._transaction() as cursor:
            _set_notes(cursor, **values)

    # -- plumbing -------------------------------------------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            raise SpoolError(f"the spool {self.file} is not open")
        return self._connection

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        connection = self._db()
        cursor = connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            yield cursor
            cursor.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:  # a failed COMMIT too: the next BEGIN must find none open
                with contextlib.suppress(sqlite3.Error):
                    cursor.execute("ROLLBACK")
            raise

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._translated, function, args)

    def _translated(self, function: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            return function(*args)
        except (sqlite3.Error, OSError) as exc:
            raise spool_error(self.file, exc) from exc


def path_blob(path: str) -> bytes:
    """A path as the spool keeps it: its bytes (a file name need not be UTF-8; SQLite's text must be)."""
    return path.encode("utf-8", "surrogateescape")


def path_text(blob: bytes | str) -> str:
    """A kept path back as Python has it (undecodable bytes as surrogate escapes, as ``os.walk`` gives them)."""
    return blob if isinstance(blob, str) else bytes(blob).decode("utf-8", "surrogateescape")


def spool_error(file: str, exc: sqlite3.Error | OSError) -> SpoolError:
    """The operator's message for what SQLite or the file system said about the spool ``file``."""
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return SpoolFull(f"the spool {file} cannot grow: {exc.strerror}; intake stops until there is room")
        return SpoolError(f"cannot use the spool {file}: {exc.strerror or exc}")
    code = getattr(exc, "sqlite_errorcode", None)
    message = str(exc)
    if code == sqlite3.SQLITE_FULL or "full" in message:
        return SpoolFull(f"the spool {file} cannot grow: the disk is full; intake stops until there is room")
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "not a database" in message \
            or "malformed" in message:
        return SpoolCorrupt(f"the spool {file} is damaged ({message}); move its directory aside to start an empty "
                            "spool (sqlite3's .recover may save its records)")
    return SpoolError(f"cannot use the spool {file}: {message}")


def _set_notes(cursor: sqlite3.Cursor, **values: Any) -> None:
    cursor.executemany("INSERT INTO notes (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                       "value = excluded.value", list(values.items()))


def _take_lock(directory: str) -> int:
    taken = try_lock(os.path.join(directory, LOCK), 0o640)
    if isinstance(taken, str):
        holder = holder_pid(taken)
        raise SpoolBusy(f"the spool {directory} is in use by another feeder"
                        + (f" (pid {holder})" if holder else "") + "; give each feeder its own --spool")
    write_holder(taken, f"{os.getpid()}\n")
    return taken


def holder_pid(text: str) -> int | None:
    """The pid a feeder wrote in the spool's lock file."""
    return int(text.strip()) if text.strip().isdigit() else None
