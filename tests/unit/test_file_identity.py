"""A file's identity travels with its record only once the file has settled, and keeps its form on the wire and in
Redis; older push daemons get the line without it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dataq.errors import InvalidRecord
from dataq.file_identity import SETTLED_NS, identity_of, settled
from dataq.record import (
    Record,
    decode_stored,
    encode_stored,
    format_line,
    parse_line,
    plain_form,
    refused_as_older,
)

SECOND = 1_000_000_000
IDENTITY = (2049, 131077, 12, 1_795_000_000_123_456_789, 1_795_000_000_987_654_321)
RECORD = Record("/data/a.fits", "0" * 32, 12, identity=IDENTITY)


def status(mtime_ns: int, ctime_ns: int) -> os.stat_result:
    """A regular file's status with the given times (device 2049, inode 131077, 12 bytes)."""
    return os.stat_result((0o100644, 131077, 2049, 1, 0, 0, 12, mtime_ns // SECOND, mtime_ns // SECOND,
                           ctime_ns // SECOND), {"st_mtime_ns": mtime_ns, "st_ctime_ns": ctime_ns})


# --- when a feeder sends it ---------------------------------------------------------------------------------


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


def test_a_feeder_line_carries_the_identity_in_the_json_form_and_parses_back() -> None:
    line = format_line(RECORD, with_identity=True)
    assert json.loads(line)["identity"] == list(IDENTITY)
    assert parse_line(line + "\n") == Record(RECORD.path, RECORD.checksum, 12, identity=IDENTITY)


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
    ([2049, 1, 13, 5, 6], "identity says 13 bytes; the record says 12"),
])
def test_a_bad_identity_is_refused_naming_what_is_wrong(identity: object, message: str) -> None:
    line = json.dumps({"path": "/data/a.fits", "checksum": "0" * 32, "size": 12, "identity": identity})
    with pytest.raises(InvalidRecord, match=message):
        parse_line(line)


def test_a_push_daemon_older_than_identities_gets_the_line_without_it() -> None:
    line = (format_line(RECORD, with_identity=True) + "\n").encode()
    assert refused_as_older(f"unknown JSON key 'identity'; expected only {sorted(['path', 'checksum', 'size'])}")
    assert plain_form(line) == f"/data/a.fits {'0' * 32} 12\n".encode()


# --- in Redis ---------------------------------------------------------------------------------------------------


def test_the_stored_value_keeps_the_identity_and_values_without_one_read_as_before() -> None:
    (with_identity,) = encode_stored([(RECORD, "feeder")], 1_795_000_000.0)
    assert decode_stored(RECORD.checksum, with_identity).identity == IDENTITY
    (without,) = encode_stored([(Record("/data/a.fits", "0" * 32, 12), "feeder")], 1_795_000_000.0)
    assert without.count("\0") == 3, "a record without an identity is stored as older dataqs store it"
    assert decode_stored(RECORD.checksum, without).identity is None


@pytest.mark.parametrize("field", ["", "1:2:3", "1:2:3:4:x", "1:2:3:4:5:6"])
def test_a_stored_identity_that_does_not_parse_is_dropped_so_the_file_is_read(field: str) -> None:
    (value,) = encode_stored([(Record("/data/a.fits", "0" * 32, 12), "feeder")], 1_795_000_000.0)
    record = decode_stored("0" * 32, f"{value}\0{field}")
    assert (record.path, record.size, record.identity) == ("/data/a.fits", 12, None)
