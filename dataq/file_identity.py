"""File identities: what tells, without reading a file, that it is still the version that was read.

A file's identity is its device, inode, size, modification and change time (ns). Any write to the file, or
another file put in its place, changes one of them: the change time is stamped by the kernel on every write,
rename, chmod or link, and cannot be set back. Actions use it to see that a source was not changed while rsync
sent it; feeders send it with a record (:attr:`dataq.record.Record.identity`) so that an action finding the
file still so need not read it again to prove the record's checksum.

A write stamps the file with the time as the filesystem keeps it: Linux's coarse clock (one tick, at most 10 ms,
behind the clock a program reads), cut to what the filesystem stores. A write that came within that granularity
of the change before it could leave every field as it was. So a feeder sends an identity only when it is
:func:`settled`: the file lies on a local filesystem whose kernel stamps its times (:data:`STAMPED_BY_KERNEL`:
not NFS, whose attributes a client caches and a server stamps with its own clock, nor FUSE or SMB, whose times
a program may set back, nor FAT's whole seconds), its last change at least :data:`SETTLED_NS` before the read
began (any later write is stamped later), and its times are not whole milliseconds. A file still being written
is read again, as it always was.

What an identity cannot see: the kernel stamps a write when it starts, so a single write of the same bytes'
length into a file in place that takes more than a second (a slow disk throttling it) may land after the
feeder read a settled file; and a program that writes through a shared memory map stamps the file at its first
write to a page, not at the later ones until the page is written back. For such writers, ``[queues.NAME]
source_check = "read"``.
"""

from __future__ import annotations

import functools
import os

Identity = tuple[int, int, int, int, int]
"""Device, inode, size, modification and change time (ns)."""
SETTLED_NS = 1_000_000_000
"""How long before a read a file must have last changed for its identity to travel with its record."""
_COARSE_NS = 1_000_000
"""Times that are whole multiples of this come from a filesystem that keeps coarse times."""
STAMPED_BY_KERNEL = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "bcachefs", "tmpfs"})
"""Local filesystems whose times the kernel stamps (the change time cannot be set back) in nanoseconds."""
MOUNTS = "/proc/self/mountinfo"


def identity_of(info: os.stat_result) -> Identity:
    """The identity (see the module docstring) of the file ``info`` describes."""
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def settled(info: os.stat_result, read_from_ns: int) -> Identity | None:
    """The identity of a file that was read from ``read_from_ns`` (``time.time_ns()``) on and was as ``info``
    says after the read, if a later write could not leave it unchanged (see the module docstring); else None."""
    latest = max(info.st_mtime_ns, info.st_ctime_ns)
    if latest > read_from_ns - SETTLED_NS:
        return None
    if info.st_mtime_ns % _COARSE_NS == 0 and info.st_ctime_ns % _COARSE_NS == 0:
        return None
    if filesystem_of(info.st_dev) not in STAMPED_BY_KERNEL:
        return None
    return identity_of(info)


@functools.lru_cache(maxsize=64)
def filesystem_of(device: int) -> str | None:
    """The type of the filesystem mounted from ``device`` (``st_dev``), from :data:`MOUNTS`; None if none is (a
    btrfs subvolume below its mount, another mount namespace, not Linux)."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open(MOUNTS, encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                # ID, parent, major:minor, root, mount point, options, optional fields..., "-", type, source, ...
                if len(fields) > 3 and fields[2] == wanted and "-" in fields[6:]:
                    return fields[fields.index("-", 6) + 1]
    except OSError:
        return None
    return None
