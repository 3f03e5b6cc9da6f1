"""File identities: what tells, without reading a file, that it is still the version that was read.

A file's identity is its device, inode, size, modification and change time (ns). Any write to the file, or
another file put in its place, changes one of them: the change time is stamped by the kernel on every write,
rename, chmod or link, and cannot be set back. Actions use it to see that a source was not changed while rsync
sent it; feeders send it with a record (:attr:`dataq.record.Record.identity`) so that an action finding the
file still so need not read it again to prove the record's checksum.

A write stamps the file with the time as the filesystem keeps it: Linux's coarse clock (one tick, at most 10 ms,
behind the clock a program reads), cut to what the filesystem stores (FAT: 2 s), or the file server's own clock.
A write that came within that granularity of the change before it could leave every field as it was. So a
feeder sends an identity only when it is :func:`settled`: the last change at least :data:`SETTLED_NS` before
its read began (any later write is stamped later, unless the granularity, or the skew between the file server's
clock and the feeder's, exceeds that), and times that are not whole milliseconds (a coarse filesystem, whose
times are whole seconds or hundredths, never sends one). A file still being written is read again, as it
always was.
"""

from __future__ import annotations

import os

Identity = tuple[int, int, int, int, int]
"""Device, inode, size, modification and change time (ns)."""
SETTLED_NS = 1_000_000_000
"""How long before a read a file must have last changed for its identity to travel with its record."""
_COARSE_NS = 1_000_000
"""Times that are whole multiples of this come from a filesystem that keeps coarse times."""


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
    return identity_of(info)
