"""An index of a storing root's manifests by checksum, so that a site can say at once whether it holds a copy of a
record (the audit questions of :mod:`dataq.audit.questions`) without reading every manifest for every question.

The manifests are the truth; the index is derived from them and kept in the site's data directory
(``<data_dir>/audit/copies-<hash of the root>.sqlite``), where the push daemon may write (its unit may only read the
root): it remembers how far it has read each manifest (they are only ever appended to) and reads on from there
before each lookup, so it costs a read of the new lines only. Deleted, it is rebuilt from the manifests; a root
whose manifests are shorter than the index has read (replaced, or restored from a backup) is read again from the
start. SQLite serialises the writers (a push daemon and an audit may refresh it at once).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from dataq.audit import manifest

INDEX_DIR = "audit"
"""The folder of the indexes under the site's data directory."""
LOOKUP_CHUNK = 500
"""Checksums per SELECT (SQLite's default limit of host parameters is 999)."""
BUSY_TIMEOUT = 30.0
"""Seconds a connection waits for another's write to end."""
MMAP_BYTES = 1 << 30
"""Bytes of the index SQLite reads by mapping the file rather than copying its pages (each question opens the index
anew: mapped pages are the system's page cache, already warm, where its own page cache would start empty)."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS copies (path BLOB PRIMARY KEY, checksum TEXT NOT NULL, size INTEGER,
                                   manifest TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS copies_by_checksum_path_size ON copies (checksum, path, size);
DROP INDEX IF EXISTS copies_by_checksum;
CREATE TABLE IF NOT EXISTS manifests (name TEXT PRIMARY KEY, offset INTEGER NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class Named:
    """A copy a manifest names: its path under the root and the size the manifest gives (None: not given)."""

    path: str
    size: int | None


class CopyIndex:
    """The index of one root's manifests; use as a context manager, or :meth:`close`."""

    def __init__(self, root: str, data_dir: str) -> None:
        self.root = root
        path = index_file(data_dir, root)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            self._db.executescript(_SCHEMA)
        except BaseException:
            self._db.close()
            raise

    def __enter__(self) -> CopyIndex:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def refresh(self) -> int:
        """Read the manifests' lines appended since the last refresh; how many entries were read."""
        read = 0
        offsets = dict(self._db.execute("SELECT name, offset FROM manifests").fetchall())
        for name in manifest.manifests(self.root):
            start = int(offsets.get(name, 0))
            try:
                size = os.path.getsize(os.path.join(self.root, name))
            except FileNotFoundError:
                continue
            if size < start:  # the manifest is not the one read before (a root replaced): read it all again
                with self._transaction():
                    self._db.execute("DELETE FROM copies WHERE manifest = ?", (name,))
                start = 0
            if size == start:
                continue
            entries, end = manifest.read_from(self.root, name, start)
            with self._transaction():
                # Paths as bytes: a file name need not be UTF-8, and SQLite's text must be.
                self._db.executemany(
                    "INSERT OR REPLACE INTO copies (path, checksum, size, manifest) VALUES (?, ?, ?, ?)",
                    [(os.fsencode(entry.path), entry.checksum, entry.size, entry.manifest) for entry in entries])
                self._db.execute("INSERT OR REPLACE INTO manifests (name, offset) VALUES (?, ?)", (name, end))
            read += len(entries)
        return read

    def lookup(self, checksums: Sequence[str]) -> dict[str, list[Named]]:
        """The copies the manifests name for each of ``checksums`` (absent: none)."""
        found: dict[str, list[Named]] = {}
        for checksum, path, size in self.copies_of(checksums):
            found.setdefault(checksum, []).append(Named(os.fsdecode(path), size))
        return found

    def copies_of(self, checksums: Sequence[str]) -> Iterator[tuple[str, bytes, int | None]]:
        """Each copy the manifests name for one of ``checksums``: (its checksum, its path under the root as bytes,
        its size), as the index holds it."""
        for start in range(0, len(checksums), LOOKUP_CHUNK):
            chunk = list(checksums[start:start + LOOKUP_CHUNK])
            marks = ",".join("?" * len(chunk))
            # Answered from the index alone, which holds every column asked: one search per checksum.
            yield from self._db.execute(f"SELECT checksum, path, size FROM copies WHERE checksum IN ({marks})", chunk)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def index_file(data_dir: str, root: str) -> str:
    """Where the index of ``root``'s manifests is kept under ``data_dir``."""
    digest = hashlib.sha256(os.path.normpath(root).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(data_dir, INDEX_DIR, f"copies-{digest}.sqlite")


def copy_state(root: str, named: list[Named]) -> tuple[str, str]:
    """(state, path) of the best of the copies ``named`` for one record: ``present`` (there with its size),
    ``corrupt`` (there with another size, or not a regular file) or ``missing``."""
    worst = ("missing", os.path.join(root, named[0].path))
    for copy in named:
        path = os.path.join(root, copy.path)
        try:
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and (copy.size is None or info.st_size == copy.size):
            return "present", path
        worst = ("corrupt", path)
    return worst
