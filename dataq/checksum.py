"""Checksums of files, read in chunks: the one place dataq hashes a file it does not also copy.

``dataq feed --scan``, ``dataq-cli --pushfile`` and the storage and transfer actions all call :func:`hash_file`
(or :func:`hash_fd` on a descriptor they hold). The copying code (``disk_store``'s copy, the archive's Spark job)
hashes the bytes it writes as it writes them, which is a different loop: one read serves both.
"""

from __future__ import annotations

import hashlib
import os
import threading

from dataq.errors import DataqError

DEFAULT_ALGORITHM = "md5"
"""The checksum of the 2014 data-q's feeders (and of the default ``checksum_pattern``)."""
CHUNK_BYTES = 1 << 20
"""Read size: large enough that hashing dominates system calls, small enough to look at the abort flag often."""


class Aborted(DataqError):
    """The caller stopped waiting (a timeout, a shutdown): the read was abandoned between two chunks."""


def check_algorithm(algorithm: str) -> str:
    """``algorithm`` if hashlib knows it; ValueError otherwise (which the options loader reports with its key)."""
    if algorithm not in hashlib.algorithms_available:
        known = ", ".join(sorted(hashlib.algorithms_guaranteed))
        raise ValueError(f"unknown checksum algorithm {algorithm!r}; use one of {known}")
    return algorithm


def hash_fd(fd: int, algorithm: str = DEFAULT_ALGORITHM, abort: threading.Event | None = None) -> tuple[str, int]:
    """(hex digest, bytes read) of the file open at ``fd``, from its start; Aborted once ``abort`` is set."""
    (digest,), total = hash_fd_many(fd, (algorithm,), abort)
    return digest, total


def hash_fd_many(fd: int, algorithms: tuple[str, ...], abort: threading.Event | None = None) -> tuple[list[str], int]:
    """(hex digest per algorithm, bytes read) of the file open at ``fd``, from its start, in one read."""
    # An identity, not a secret: FIPS hosts allow it.
    digests = [hashlib.new(algorithm, usedforsecurity=False) for algorithm in algorithms]
    total = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, CHUNK_BYTES):
        if abort is not None and abort.is_set():
            raise Aborted("checksum aborted")
        for digest in digests:
            digest.update(chunk)
        total += len(chunk)
    return [digest.hexdigest() for digest in digests], total


def hash_file(path: str, algorithm: str = DEFAULT_ALGORITHM, abort: threading.Event | None = None) -> tuple[str, int]:
    """(hex digest, bytes read) of the file at ``path``: the digest and the size describe the same bytes, even if
    the file changes meanwhile. Raises OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return hash_fd(fd, algorithm, abort)
    finally:
        os.close(fd)
