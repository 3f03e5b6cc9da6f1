"""Manifests of stored copies: which copy a storing action keeps under its root, in a form any ``md5sum -c`` checks.

``disk_store`` appends, for every copy it stores (and every copy a retry finds stored already), two lines to the
manifest of the day (UTC) under the root, ``.dataq/manifests/manifest-<algorithm>-<YYYYMMDD>.txt``::

    #dataq size=2880 stored=2026-11-28T12:00:00.123Z
    0cc175b9c0f1b6a831c399e269772661  20261128/0c/0cc175b9c0f1b6a831c399e269772661

The second is the line of GNU ``md5sum`` (``sha256sum``, ``xxh128sum``): the checksum, two spaces, the copy's
path under the root (a name holding a backslash or a newline is escaped as coreutils does, the line then starting
with a backslash). The first is a comment, which ``md5sum -c`` skips, holding what the checksum line cannot: the
copy's size and when it was stored. So an operator checks a root without dataq, from the root::

    cd /archive && md5sum -c .dataq/manifests/manifest-md5-20261128.txt

This follows BagIt (RFC 8493), whose ``manifest-<algorithm>.txt`` files are such lines. The lines are appended
after the copies are published and made durable with the copies' names (one sync of the filesystem), before any
record of the batch is done: a crash in between leaves a copy that no manifest names yet, and its record, not done,
runs again, finds the copy stored and appends its lines then. A batch's lines go in one ``write`` to a file opened
for appending, so the lines of two pop daemons storing into one root never interleave. A copy stored twice (a
retry) is named twice; readers keep the last entry per path.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from dataq.checksum import HEX_DIGITS
from dataq.durable import sync_directory

OWN_DIR = ".dataq"
"""The folder under a storing root that dataq owns: manifests and quarantine, never a stored copy."""
MANIFEST_DIR = f"{OWN_DIR}/manifests"
QUARANTINE_DIR = f"{OWN_DIR}/quarantine"
MANIFEST_MODE = 0o644
_COMMENT = "#dataq "
_NAME = re.compile(r"manifest-(?P<algorithm>[a-z0-9]+)-(?P<day>[0-9]{8})\.txt")


@dataclass(frozen=True, slots=True)
class Entry:
    """One copy a manifest names."""

    checksum: str
    path: str
    """Relative to the root."""
    size: int | None = None
    """None: the checksum line had no comment before it (written by hand)."""
    stored_at: float | None = None
    manifest: str = ""
    """The manifest file (relative to the root) that names it last."""
    algorithm: str = ""


def manifest_name(algorithm: str, when: float) -> str:
    """The manifest a copy stored at ``when`` goes in, relative to the root."""
    day = datetime.fromtimestamp(when, UTC).strftime("%Y%m%d")
    return f"{MANIFEST_DIR}/manifest-{algorithm}-{day}.txt"


def _escaped(path: str) -> tuple[str, str]:
    """(line prefix, name) as GNU coreutils writes a name holding a backslash or a newline."""
    if "\\" not in path and "\n" not in path and "\r" not in path:
        return "", path
    return "\\", path.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _unescaped(name: str) -> str:
    out, chars = [], iter(name)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            out.append({"n": "\n", "r": "\r", "\\": "\\"}.get(following, "\\" + following))
        else:
            out.append(char)
    return "".join(out)


def lines(entries: Sequence[Entry], when: float) -> bytes:
    """The manifest lines of copies stored at ``when``."""
    stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(when * 1000) % 1000:03d}Z"
    parts = []
    for entry in entries:
        prefix, name = _escaped(entry.path)
        parts.append(f"{_COMMENT}size={entry.size} stored={stamp}\n{prefix}{entry.checksum}  {name}\n")
    return "".join(parts).encode("utf-8", "surrogateescape")


def append(root: str, algorithm: str, entries: Sequence[Entry], *, sync: bool,
           when: float | None = None) -> None:
    """Append the lines of ``entries`` to the day's manifest under ``root`` in one write (creating the folders);
    with ``sync``, fsync it (and a folder created) before returning. OSError if it cannot be written."""
    if not entries:
        return
    when = time.time() if when is None else when
    relative = manifest_name(algorithm, when)
    directory = os.path.join(root, MANIFEST_DIR)
    created = not os.path.isdir(directory)
    if created:
        os.makedirs(directory, exist_ok=True)
    data = lines(entries, when)
    fd = os.open(os.path.join(root, relative), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                 MANIFEST_MODE)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a full disk mid-write: the line cut short is skipped by readers
            raise OSError(28, f"only {written} of {len(data)} bytes of the manifest lines were written")
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if sync and created:
        for folder in (directory, os.path.dirname(directory), root):
            sync_directory(folder)


def manifests(root: str) -> list[str]:
    """The manifest files under ``root`` (relative to it), oldest day first."""
    directory = os.path.join(root, MANIFEST_DIR)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return [f"{MANIFEST_DIR}/{name}" for name in sorted(names, key=lambda n: (n[-12:], n)) if _NAME.fullmatch(name)]


def read(root: str, relative: str) -> Iterator[Entry]:
    """The entries of one manifest, in order; lines that are not entries (a line cut short by a crash, an
    operator's comment) are skipped."""
    entries, _ = read_from(root, relative, 0)
    yield from entries


def read_from(root: str, relative: str, start: int) -> tuple[list[Entry], int]:
    """The entries of one manifest from byte ``start`` (the end of an entry), and the offset after the last
    complete entry read: where the next read of the growing file starts."""
    match = _NAME.fullmatch(os.path.basename(relative))
    algorithm = match["algorithm"] if match else ""
    digits = HEX_DIGITS.get(algorithm)
    size: int | None = None
    stored: float | None = None
    found: list[Entry] = []
    offset = end = start
    with open(os.path.join(root, relative), "rb") as file:
        file.seek(start)
        for raw in file:
            if not raw.endswith(b"\n"):
                break  # the last line of a write cut short, or being written
            offset += len(raw)
            text = raw[:-1].decode("utf-8", "surrogateescape")
            if text.startswith(_COMMENT):
                size, stored = _comment(text)
                continue
            entry = _entry(text, digits)
            if entry is not None:
                checksum, path = entry
                found.append(Entry(checksum, path, size, stored, relative, algorithm))
            size = stored = None
            end = offset
    return found, end


def _comment(text: str) -> tuple[int | None, float | None]:
    fields = dict(part.split("=", 1) for part in text[len(_COMMENT):].split() if "=" in part)
    size = int(fields["size"]) if fields.get("size", "").isdigit() else None
    try:
        stored = datetime.strptime(fields.get("stored", ""), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        stored = None
    return size, stored


def _entry(text: str, digits: int | None) -> tuple[str, str] | None:
    escaped = text.startswith("\\")
    body = text[1:] if escaped else text
    checksum, separator, name = body.partition("  ")
    if not separator or not name or (digits is not None and len(checksum) != digits):
        return None
    path = _unescaped(name) if escaped else name
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        return None  # a line written by hand that would lead out of the root: not a copy of it
    return checksum, path


def entries(root: str) -> dict[str, Entry]:
    """Every copy the manifests under ``root`` name, by path; a path named more than once: its last entry."""
    found: dict[str, Entry] = {}
    for relative in manifests(root):
        for entry in read(root, relative):
            found[entry.path] = entry
    return found
