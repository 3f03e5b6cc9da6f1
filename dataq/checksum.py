"""Checksums of files, read in chunks: the one place dataq hashes a file it does not also copy.

A queue's records carry one algorithm's checksum (``[queues.NAME] checksum``): ``md5`` (the 2014 data-q's, the
default), ``sha256`` or ``xxh128`` (XXH3-128: ~40 times md5's speed, for identity, not against an adversary).
A record's checksum is its id, so a 32-bit checksum such as adler32 (what Rucio and FTS3 compare beside md5) is
refused: two different files would share an id, and the second would be ``Ignored``. :func:`new_hasher` makes
any of them, and the hashlib names the actions' older ``algorithm`` options took. Every digest is lower-case
hex, its width fixed by the algorithm (:data:`HEX_DIGITS`).

``dataq feed --scan``, ``dataq-cli --pushfile`` and the storage and transfer actions all call :func:`hash_file`
(or :func:`hash_fd` on a descriptor they hold). The copying code (``disk_store``'s copy, the archive's Spark job)
hashes the bytes it writes as it writes them, which is a different loop: one read serves both. Each hasher
releases the GIL on a chunk, so files hashed on several threads use every core.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import TYPE_CHECKING, Protocol

import xxhash

from dataq.errors import DataqError
from dataq.file_identity import Identity, identity_of, settled

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

DEFAULT_ALGORITHM = "md5"
"""The checksum of the 2014 data-q's feeders (and of the default ``checksum_pattern``)."""
IDENTITY_ALGORITHM = "xxh128"
"""The hash of a read whose only job is to prove two copies hold the same bytes (a copy read back)."""
HEX_DIGITS = {"md5": 32, "sha256": 64, "xxh128": 32}
"""The algorithms a queue's ``checksum`` may name, and the hex digits of their digests."""
TOO_NARROW = {"adler32": 32, "crc32": 32, "crc32c": 32}
"""Checksums too narrow to be record ids, by their bits."""
LARGE_FILE_BYTES = 8 << 20
"""Files this large are hashed on threads of their own (as many as CPUs), beside those of smaller files: a large
file's seconds of hashing never hold up a small file behind it."""
CHUNK_BYTES = 1 << 20
"""Read size: large enough that hashing dominates system calls, small enough to look at the abort flag often."""


class Aborted(DataqError):
    """The caller stopped waiting (a timeout, a shutdown): the read was abandoned between two chunks."""


class Hasher(Protocol):
    def update(self, data: ReadableBuffer, /) -> None: ...

    def hexdigest(self) -> str: ...


def check_queue_algorithm(algorithm: str) -> str:
    """``algorithm`` if a queue's ``checksum`` may name it; ValueError naming the choices otherwise."""
    if algorithm in TOO_NARROW:
        raise ValueError(f"{algorithm} cannot be a queue's checksum: a record's checksum is its id, and "
                         f"{TOO_NARROW[algorithm]} bits collide (a second file with the same {algorithm} would be "
                         f"Ignored, never moved); use xxh128 (as fast) or sha256")
    if algorithm not in HEX_DIGITS:
        raise ValueError(f"unknown checksum algorithm {algorithm!r}; use one of {', '.join(HEX_DIGITS)}")
    return algorithm


def check_algorithm(algorithm: str) -> str:
    """``algorithm`` if :func:`new_hasher` knows it (a queue's algorithm, or a hashlib name); ValueError
    otherwise (which the options loader reports with its key)."""
    if algorithm not in HEX_DIGITS and algorithm not in hashlib.algorithms_available:
        known = ", ".join(sorted(set(HEX_DIGITS) | hashlib.algorithms_guaranteed))
        raise ValueError(f"unknown checksum algorithm {algorithm!r}; use one of {known}")
    return algorithm


def digest_width(algorithm: str) -> int:
    """Hex digits of ``algorithm``'s digests."""
    return HEX_DIGITS.get(algorithm) or 2 * hashlib.new(algorithm, usedforsecurity=False).digest_size


def new_hasher(algorithm: str) -> Hasher:
    """A fresh hasher of ``algorithm`` (see :func:`check_algorithm`)."""
    if algorithm == "xxh128":
        return xxhash.xxh3_128()
    # An identity, not a secret: FIPS hosts allow it.
    return hashlib.new(algorithm, usedforsecurity=False)


def hash_fd(fd: int, algorithm: str = DEFAULT_ALGORITHM, abort: threading.Event | None = None) -> tuple[str, int]:
    """(hex digest, bytes read) of the file open at ``fd``, from its start; Aborted once ``abort`` is set."""
    (digest,), total = hash_fd_many(fd, (algorithm,), abort)
    return digest, total


def hash_fd_many(fd: int, algorithms: tuple[str, ...], abort: threading.Event | None = None) -> tuple[list[str], int]:
    """(hex digest per algorithm, bytes read) of the file open at ``fd``, from its start, in one read."""
    digests = [new_hasher(algorithm) for algorithm in algorithms]
    total = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, CHUNK_BYTES):
        if abort is not None and abort.is_set():
            raise Aborted("checksum aborted")
        for digest in digests:
            digest.update(chunk)
        total += len(chunk)
    return [digest.hexdigest() for digest in digests], total


class FileHashing:
    """Hashes many files one after the other with ``algorithm``, into one buffer (an audit's worker hashes
    100,000 files of 20 KB: a new buffer, a new chunk object and a hashlib name looked up per file cost a sixth of
    what the hashing does)."""

    def __init__(self, algorithm: str) -> None:
        constructor = getattr(hashlib, algorithm, None) if algorithm in hashlib.algorithms_guaranteed else None
        # hashlib's named constructors are OpenSSL's own; hashlib.new goes through Python first.
        self._new = (lambda: constructor(usedforsecurity=False)) if constructor is not None else \
            (lambda: new_hasher(algorithm))
        self._buffer = bytearray(CHUNK_BYTES)
        self._view = memoryview(self._buffer)

    def of_regular_file(self, fd: int, size: int) -> tuple[str, int]:
        """(hex digest, bytes read) of the regular file open at ``fd``, ``size`` bytes as its ``fstat`` said, read
        from where it stands (a file just opened: its start) to its end. A read shorter than the buffer once
        ``size`` bytes are in is taken as the end (a small file is one read, not two); before, it is not (some file
        systems return short reads: FUSE, CIFS), and the reads go on to the one that returns nothing."""
        digest = self._new()
        total = 0
        buffers = [self._buffer]
        while read := os.readv(fd, buffers):
            digest.update(self._view[:read])
            total += read
            if read < CHUNK_BYTES and total >= size:
                break
        return digest.hexdigest(), total


def hash_file_settled(path: str, algorithm: str = DEFAULT_ALGORITHM,
                      abort: threading.Event | None = None) -> tuple[str, int, Identity | None]:
    """:func:`hash_file`, and the file's identity if it had settled before the read and did not change during it
    (:func:`dataq.file_identity.settled`): what a feeder sends with the record."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        started = time.time_ns()
        before = os.fstat(fd)
        digest, total = hash_fd(fd, algorithm, abort)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    unchanged = identity_of(before) == identity_of(after) and total == after.st_size
    return digest, total, settled(after, started) if unchanged else None


def hash_file(path: str, algorithm: str = DEFAULT_ALGORITHM, abort: threading.Event | None = None) -> tuple[str, int]:
    """(hex digest, bytes read) of the file at ``path``: the digest and the size describe the same bytes, even if
    the file changes meanwhile. Raises OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return hash_fd(fd, algorithm, abort)
    finally:
        os.close(fd)
