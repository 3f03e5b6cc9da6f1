"""A file's identity travels with its record only once the file has settled, and keeps its form on the wire and in
Redis; older push daemons get the line without it."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from dataq import file_identity
from dataq.errors import InvalidRecord
from dataq.file_identity import SETTLED_NS, filesystem_of, identity_of, settled
from dataq.handshake import Capability
from dataq.record import (
    Record,
    RecordRules,
    form_for,
    format_line,
    parse_line,
)
from dataq.stored_value import decode_stored, encode_stored

SECOND = 1_000_000_000
IDENTITY = (2049, 131077, 12, 1_795_000_000_123_456_789, 1_795_000_000_987_654_321)
RECORD = Record("/data/a.fits", "0" * 32, 12, identity=IDENTITY, algorithm="md5")


def status(mtime_ns: int, ctime_ns: int) -> os.stat_result:
    """A regular file's status with the given times (device 2049, inode 131077, 12 bytes)."""
    return os.stat_result((0o100644, 131077, 2049, 1, 0, 0, 12, mtime_ns // SECOND, mtime_ns // SECOND,
                           ctime_ns // SECOND), {"st_mtime_ns": mtime_ns, "st_ctime_ns": ctime_ns})


# --- when a feeder sends it ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def on_ext4(monkeypatch: pytest.MonkeyPatch) -> None:
    """The made-up device 2049 is an ext4 filesystem."""
    monkeypatch.setattr(file_identity, "filesystem_of", lambda device: "ext4" if device == 2049 else None)


def test_a_file_changed_a_second_or_more_before_its_read_sends_its_identity() -> None:
    changed = 1_795_000_000_123_456_789
    info = status(changed - 5 * SECOND, changed)
    assert settled(info, changed + SETTLED_NS) == (2049, 131077, 12, changed - 5 * SECOND, changed)


@pytest.mark.parametrize("age_ns", [0, 1, SETTLED_NS // 2, SETTLED_NS - 1])
def test_a_file_changed_less_than_a_second_before_its_read_sends_none(age_ns: int) -> None:
    changed = 1_795_000_000_123_456_789
    # A write just after the read could still be stamped with the same times: the action reads such a file.
    assert settled(status(changed - 9 * SECOND, changed), changed + age_ns) is None
    assert settled(status(changed, changed - 9 * SECOND), changed + age_ns) is None, "modification time too"


@pytest.mark.parametrize("filesystem", ["nfs4", "fuse.rclone", "cifs", "vfat", "overlay", None])
def test_a_file_on_a_filesystem_whose_times_the_kernel_does_not_stamp_sends_none(
        filesystem: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # NFS: a client's cached attributes, a server's clock; FUSE and SMB: times a program may set back.
    monkeypatch.setattr(file_identity, "filesystem_of", lambda device: filesystem)
    changed = 1_795_000_000_123_456_789
    assert settled(status(changed, changed), changed + 60 * SECOND) is None


def test_the_filesystem_of_a_device_is_read_from_the_mount_table() -> None:
    assert filesystem_of(os.stat("/proc").st_dev) == "proc"
    assert filesystem_of(os.makedev(4095, 1048575)) is None


def test_a_file_whose_times_are_whole_milliseconds_sends_none() -> None:
    # FAT keeps whole seconds (or two), exFAT hundredths: two writes a while apart may get the same time.
    coarse = 1_795_000_000 * SECOND
    assert settled(status(coarse, coarse + 10_000_000), coarse + 60 * SECOND) is None
    assert settled(status(coarse, coarse + 10_000_001), coarse + 60 * SECOND) is not None


def test_the_identity_of_a_real_file_changes_with_a_write_of_the_same_size(tmp_path: Path) -> None:
    path = tmp_path / "a.fits"
    path.write_bytes(b"first light!")
    before = identity_of(os.stat(path))
    path.write_bytes(b"second light")
    assert identity_of(os.stat(path)) != before
    assert identity_of(os.stat(path))[2] == 12


# --- on the wire ------------------------------------------------------------------------------------------------


def test_a_feeder_line_carries_the_identity_and_its_algorithm_in_the_json_form_and_parses_back() -> None:
    line = format_line(RECORD, with_identity=True)
    assert json.loads(line)["identity"] == list(IDENTITY) and json.loads(line)["algorithm"] == "md5"
    assert parse_line(line + "\n") == Record(RECORD.path, RECORD.checksum, 12, identity=IDENTITY)


def test_an_identity_for_a_checksum_of_another_algorithm_or_of_none_is_refused() -> None:
    # md5 and xxh128 digests look alike: a feeder set up for md5 must not have its checksum taken as a proven xxh128.
    line = format_line(RECORD, with_identity=True)
    with pytest.raises(InvalidRecord, match="checksum algorithm 'md5' is not this queue's: its checksums are xxh128"):
        parse_line(line, RecordRules(algorithm="xxh128"))
    unnamed = json.dumps({"path": "/data/a.fits", "checksum": "0" * 32, "size": 12, "identity": list(IDENTITY)})
    with pytest.raises(InvalidRecord, match="identity needs the key 'algorithm'"):
        parse_line(unnamed)


def test_other_lines_keep_their_form_without_the_identity() -> None:
    # dataq-cli --dump and record files: the text form, as before.
    assert format_line(RECORD) == f"/data/a.fits {'0' * 32} 12"
    assert format_line(Record("/data/a.fits", "0" * 32, 12), with_identity=True) == f"/data/a.fits {'0' * 32} 12"


@pytest.mark.parametrize(("identity", "message"), [
    ("2049:1:12:5:6", "is not a list of 5 integers"),
    ([2049, 1, 12, 5], "is not a list of 5 integers"),
    ([2049, 1, 12, 5, True], "is not a list of 5 integers"),
    ([2049, -1, 12, 5, 6], "is not a list of 5 integers"),
    ([2049, 1, 12, 5.5, 6], "is not a list of 5 integers"),
    ([2049, 1, 12, 5, 2**64], "is not a list of 5 integers"),
    ([2049, 1, 13, 5, 6], "identity says 13 bytes; the record says 12"),
])
def test_a_bad_identity_is_refused_naming_what_is_wrong(identity: object, message: str) -> None:
    line = json.dumps({"path": "/data/a.fits", "checksum": "0" * 32, "size": 12, "algorithm": "md5",
                       "identity": identity})
    with pytest.raises(InvalidRecord, match=message):
        parse_line(line)


def test_a_push_daemon_that_does_not_speak_identities_gets_the_line_without_it() -> None:
    line = (format_line(RECORD, with_identity=True) + "\n").encode()
    assert form_for(line, frozenset()) == f"/data/a.fits {'0' * 32} 12\n".encode()
    assert form_for(line, frozenset({Capability.ALGORITHM})) == (json.dumps(
        {"path": "/data/a.fits", "checksum": "0" * 32, "size": 12, "algorithm": "md5"}) + "\n").encode()
    fast = (format_line(replace(RECORD, algorithm="xxh128"), with_identity=True) + "\n").encode()
    assert json.loads(form_for(fast, frozenset())) == {"path": "/data/a.fits", "checksum": "0" * 32, "size": 12,
                                            "algorithm": "xxh128"}, "an xxh128 record keeps its algorithm"


# --- in Redis ---------------------------------------------------------------------------------------------------


def test_the_stored_value_keeps_the_identity_and_values_without_one_read_as_before() -> None:
    (with_identity,) = encode_stored([(RECORD, "feeder")], 1_795_000_000.0)
    assert decode_stored(RECORD.checksum, with_identity).identity == IDENTITY
    (without,) = encode_stored([(Record("/data/a.fits", "0" * 32, 12), "feeder")], 1_795_000_000.0)
    assert without.count("\0") == 3, "a record without an identity is stored as older dataqs store it"
    assert decode_stored(RECORD.checksum, without).identity is None


@pytest.mark.parametrize("field", ["", "1:2:3", "1:2:3:4:x", "1:2:3:4:5:6", "1:2:3:4:\u00b2"])
def test_a_stored_identity_that_does_not_parse_is_dropped_so_the_file_is_read(field: str) -> None:
    (value,) = encode_stored([(Record("/data/a.fits", "0" * 32, 12), "feeder")], 1_795_000_000.0)
    record = decode_stored("0" * 32, f"{value}\0{field}")
    assert (record.path, record.size, record.identity) == ("/data/a.fits", 12, None)
