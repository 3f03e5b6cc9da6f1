"""Making what was written durable: the one helper every module that writes files beside its data shares."""

from __future__ import annotations

import os


def sync_directory(directory: str) -> None:
    """Make the entries created, renamed or removed in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
