"""Lock files: an exclusive ``flock`` held for as long as a process uses a directory (the embedded redis-server's
data directory, a feeder's spool), with a few lines in the file saying who holds it.

Hand-written on ``fcntl.flock``: the lock goes with the process (the kernel drops it when the holder dies, even
by SIGKILL), which a lock library built on lock files' existence or on Redis could not give here.
"""

from __future__ import annotations

import fcntl
import os

HOLDER_TEXT_MAX_BYTES = 4096


def try_lock(path: str | os.PathLike[str], mode: int = 0o600) -> int | str:
    """Take the lock file at ``path``: its descriptor (keep it open to hold the lock), or, when another process
    holds it, the text that process wrote in it. OSError if the file cannot be opened or locked at all."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = _text(fd)
        os.close(fd)
        return text
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_holder(fd: int, text: str) -> None:
    """Say who holds the lock (``fd`` from :func:`try_lock`), replacing what the file said."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def held_lock_text(path: str | os.PathLike[str]) -> str | None:
    """What the holder of the lock file at ``path`` wrote in it; None if the file is missing or nobody holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _text(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _text(fd: int) -> str:
    return os.pread(fd, HOLDER_TEXT_MAX_BYTES, 0).decode(errors="replace")
