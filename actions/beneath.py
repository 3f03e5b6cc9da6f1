"""Files beneath a storage root, written safely and made durable: directories walked without following a
symlink, names published atomically without clobbering, and the whole filesystem synced at once.

:mod:`.storing` builds ``disk_store``'s verified atomic store on these.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Callable

from .layout import UnsafePath

# Hard links make publishing no-clobber; these errors mean the filesystem has none, so rename is used instead.
NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK})
# What opening a directory component with O_NOFOLLOW reports for a symlink or a non-directory.
NOT_A_PLAIN_DIR = frozenset({errno.ELOOP, errno.ENOTDIR})


def _find_syncfs() -> Callable[[int], int] | None:
    try:
        function: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):
        return None
    return function


SYNCFS = _find_syncfs()


def sync_filesystem(fd: int) -> None:
    """Make everything written to the filesystem of ``fd`` durable; OSError with what write-back reported."""
    assert SYNCFS is not None
    if SYNCFS(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def open_beneath(root: str, parts: tuple[str, ...], *, sync_new: bool = True) -> int:
    """A descriptor of directory ``root/parts...``, created as needed, never following a symlink below ``root``.

    Walking one component at a time with O_NOFOLLOW (instead of resolving the path, then opening it) leaves no
    window in which a symlink swapped in could send the write elsewhere. A directory created is fsynced into
    its parent unless ``sync_new`` is false (a sync of the whole filesystem follows before anything is
    published in it).
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            try:
                os.mkdir(part, dir_fd=fd)
                if sync_new:
                    os.fsync(fd)  # the new directory's entry must survive a crash, or so would not the file
            except FileExistsError:
                pass
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in NOT_A_PLAIN_DIR:
                    raise UnsafePath(f"{part!r} under {root} is a symlink or not a directory; refusing") from exc
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def publish(dir_fd: int, temp: str, name: str) -> bool:
    """Give ``temp`` its final ``name`` atomically; False if ``name`` appeared meanwhile (``temp`` is kept)."""
    try:
        # A hard link never replaces an existing file (rename would), so a conflicting file is never clobbered.
        os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in NO_HARD_LINKS:
            raise
        if lexists(dir_fd, name):
            return False
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return True
    os.unlink(temp, dir_fd=dir_fd)
    return True


def lexists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def unlink_quietly(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
