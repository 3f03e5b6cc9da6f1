"""The copies audit of a storing root (``dataq audit --copies``): every copy its manifests name is present with its
size (with ``deep``, re-read and re-hashed too), and every file under the root is named by a manifest.

This is Rucio's storage consistency check and ``rclone check`` on one side: the manifests are the catalogue, the
root's listing the storage. Nothing here writes: the repair is :mod:`dataq.audit.repair`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dataq.audit import manifest
from dataq.audit.findings import FileClass, Finding
from dataq.checksum import hash_fd

TEMP_SUFFIX = ".dataq-tmp"
"""A copy being written (``disk_store``'s temporary name): neither a stored copy nor a dark file."""

Tick = Callable[[int], None]
"""Told of each file checked (its size), for progress."""


@dataclass(frozen=True, slots=True)
class RootState:
    """What a root holds: the copies its manifests name, and whether anything but dataq's own folder is there."""

    entries: dict[str, manifest.Entry]
    holds_files: bool


def state_of(root: str, skip: tuple[str, ...] = ()) -> RootState:
    """The manifests' copies and whether the root holds any file of its own (a root that holds none while its
    manifests name copies looks unmounted); ``skip``: top folders of the root that hold no copies (a catalog)."""
    entries = manifest.entries(root)
    holds = any(name != manifest.OWN_DIR and name not in skip for name in os.listdir(root))
    return RootState(entries, holds)


def check_copy(root: str, entry: manifest.Entry, site: str, deep: bool) -> Finding:
    """What the audit says of one copy a manifest names (:attr:`FileClass.ARRIVED` when it is as named)."""
    path = os.path.join(root, entry.path)

    def finding(file_class: FileClass, detail: str = "") -> Finding:
        return Finding(path, entry.checksum, file_class, site, detail)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return finding(FileClass.MISSING_COPY, f"named by {entry.manifest}, not on disk")
    except OSError as exc:
        return finding(FileClass.UNREADABLE, f"cannot open it: {exc.strerror or exc}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return finding(FileClass.CORRUPT_COPY, "not a regular file")
        if entry.size is not None and info.st_size != entry.size:
            return finding(FileClass.CORRUPT_COPY, f"{info.st_size} bytes; {entry.manifest} says {entry.size}")
        if deep and entry.algorithm:
            digest, read = hash_fd(fd, entry.algorithm)
            if digest != entry.checksum:
                return finding(FileClass.CORRUPT_COPY, f"{entry.algorithm} {digest} of {read} bytes read back; "
                                                       f"{entry.manifest} says {entry.checksum}")
    except OSError as exc:
        return finding(FileClass.UNREADABLE, f"cannot read it: {exc.strerror or exc}")
    finally:
        os.close(fd)
    return finding(FileClass.ARRIVED)


def check_copies(root: str, entries: dict[str, manifest.Entry], site: str, *, deep: bool,
                 tick: Tick | None = None, workers: int | None = None) -> list[Finding]:
    """Each named copy checked, on every core (hashing releases the GIL), in the manifests' order."""
    def one(entry: manifest.Entry) -> Finding:
        found = check_copy(root, entry, site, deep)
        if tick is not None:
            tick(entry.size or 0)
        return found

    with ThreadPoolExecutor(workers or os.cpu_count() or 1, thread_name_prefix="dataq-audit") as pool:
        return list(pool.map(one, entries.values()))


def dark_files(root: str, entries: dict[str, manifest.Entry], site: str,
               skip: tuple[str, ...] = ()) -> Iterator[Finding]:
    """Files under ``root`` that no manifest names (dataq's own folder, the top folders of ``skip`` and copies
    being written aside)."""
    for directory, folders, names in os.walk(root):
        if directory == root:
            folders[:] = [name for name in folders if name != manifest.OWN_DIR and name not in skip]
        relative_dir = os.path.relpath(directory, root)
        for name in names:
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                continue
            relative = name if relative_dir == "." else f"{relative_dir}/{name}"
            if relative not in entries:
                yield Finding(os.path.join(directory, name), "", FileClass.DARK, site,
                              "under the root, named by no manifest")
