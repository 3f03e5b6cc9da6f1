"""Every checksum algorithm a queue may use gives the published digests, whether the bytes come whole or in
chunks, and a queue's checksum decides what its records must look like."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from dataq.checksum import (
    HEX_DIGITS,
    FileHashing,
    check_algorithm,
    check_queue_algorithm,
    hash_fd,
    hash_fd_many,
    hash_file,
    new_hasher,
)
from dataq.config import QueueSettings
from dataq.errors import ConfigError, InvalidRecord
from dataq.record import parse_line
from tests.checksum_vectors import ALGORITHMS, VECTORS


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_algorithm_gives_the_published_digests(algorithm: str, tmp_path: Path) -> None:
    for data, expected in VECTORS[algorithm].items():
        whole = new_hasher(algorithm)
        whole.update(data)
        assert whole.hexdigest() == expected
        piecewise = new_hasher(algorithm)
        for byte in data:
            piecewise.update(bytes([byte]))
        assert piecewise.hexdigest() == expected, "chunks hash as the whole"
        path = tmp_path / f"{algorithm}-{len(data)}"
        path.write_bytes(data)
        assert hash_file(str(path), algorithm) == (expected, len(data))
        assert len(expected) == HEX_DIGITS[algorithm]


def test_one_read_gives_every_digest_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "abc"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDONLY)
    try:
        digests, read = hash_fd_many(fd, ALGORITHMS)
    finally:
        os.close(fd)
    assert (digests, read) == ([VECTORS[algorithm][b"abc"] for algorithm in ALGORITHMS], 3)


def test_a_queue_may_name_three_algorithms_and_older_options_any_of_hashlibs() -> None:
    assert [check_queue_algorithm(name) for name in ALGORITHMS] == list(ALGORITHMS)
    with pytest.raises(ValueError, match="unknown checksum algorithm 'blake3'; use one of md5, sha256, xxh128"):
        check_queue_algorithm("blake3")
    assert check_algorithm("sha1") == "sha1"
    with pytest.raises(ValueError, match="unknown checksum algorithm 'nope'"):
        check_algorithm("nope")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_queues_records_must_carry_its_algorithms_checksums(algorithm: str) -> None:
    rules = QueueSettings("q", checksum=algorithm).rules
    checksum = VECTORS[algorithm][b"abc"]
    assert parse_line(f"/data/abc {checksum} 3", rules).checksum == checksum
    other = "sha256" if algorithm != "sha256" else "md5"
    with pytest.raises(InvalidRecord, match=f"of this queue's {algorithm} checksums"):
        parse_line(f"/data/abc {VECTORS[other][b'abc']} 3", rules)


def test_a_hand_on_naming_another_algorithm_is_refused_by_name() -> None:
    # md5 and xxh128 digests look alike (32 hex digits): only the name tells them apart.
    rules = QueueSettings("q", checksum="xxh128").rules
    line = '{"path": "/data/abc", "checksum": "900150983cd24fb0d6963f7d28e17f72", "size": 3, "algorithm": "md5"}'
    with pytest.raises(InvalidRecord, match="checksum algorithm 'md5' is not this queue's: its checksums are xxh128"):
        parse_line(line, rules)
    assert parse_line(line.replace('"md5"', '"xxh128"'), rules).size == 3
    older = '{"path": "/data/abc", "checksum": "900150983cd24fb0d6963f7d28e17f72", "size": 3, "site": "mountain"}'
    with pytest.raises(InvalidRecord, match="'md5' is not this queue's"):
        parse_line(older, rules)  # a site older than algorithm names hands on md5


def test_a_custom_pattern_still_applies_with_the_queues_algorithm() -> None:
    rules = QueueSettings("q", checksum="sha256", checksum_pattern="[0-9A-F]{64}").rules
    assert rules.algorithm == "sha256"
    assert parse_line(f"/d/a {'A' * 64} 1", rules).size == 1


def test_a_32_bit_checksum_cannot_be_a_queues_because_it_is_the_records_id() -> None:
    # Rucio and FTS3 compare adler32 beside md5; as an id, two files in 4 billion share it, and the second would be
    # answered Ignored and never moved (some 4 a day at 50,000 files a day and 7 days remembered).
    with pytest.raises(ConfigError, match="adler32 cannot be a queue's checksum: a record's checksum is its id"):
        QueueSettings("q", checksum="adler32")


def test_many_files_hashed_in_one_buffer_read_past_a_short_read_to_the_size_fstat_gave() -> None:
    # A pipe stands for a file system that returns short reads (FUSE, CIFS): its first read returns the first part.
    reader, writer = os.pipe()
    parts = [b"first part of the file ", b"and the rest of it"]

    def write_in_two() -> None:
        os.write(writer, parts[0])
        time.sleep(0.2)
        os.write(writer, parts[1])
        os.close(writer)

    thread = threading.Thread(target=write_in_two)
    thread.start()
    try:
        digest, size = FileHashing("md5").of_regular_file(reader, len(b"".join(parts)))
    finally:
        thread.join()
        os.close(reader)
    assert (digest, size) == (hashlib.md5(b"".join(parts)).hexdigest(), len(b"".join(parts)))


def test_a_regular_file_is_read_once_to_its_size_and_hashed_as_hash_fd_does(tmp_path: Path) -> None:
    path = tmp_path / "frame.fits"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 5))
    hashing = FileHashing("sha256")
    for _ in range(2):  # the buffer is reused
        fd = os.open(path, os.O_RDONLY)
        try:
            assert hashing.of_regular_file(fd, path.stat().st_size) == hash_fd(fd, "sha256")
        finally:
            os.close(fd)
