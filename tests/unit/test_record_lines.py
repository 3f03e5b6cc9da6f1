"""The text-form record line: the one-match path for common lines agrees with the field-by-field parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataq.errors import InvalidRecord
from dataq.handshake import LEGACY, OURS, Capability
from dataq.record import (
    MAX_PATH_LENGTH,
    MAX_SIZE,
    Record,
    RecordRules,
    _parse_line_fully,
    form_for,
    format_line,
    handon_line,
    parse_line,
)
from dataq.stored_value import decode_stored, encode_stored

printable = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
odd = st.sampled_from(["\t", "\x00", "\x7f", "\x1f", "é", "\u00a0", "\u2003", "\r", "{"])
field_chars = st.one_of(printable, printable, printable, odd)
paths = st.one_of(
    st.text(field_chars, max_size=40).map(lambda tail: "/" + tail),
    st.text(field_chars, max_size=40),
    st.just("/" + "p" * (MAX_PATH_LENGTH - 1)),
    st.just("/" + "p" * MAX_PATH_LENGTH),
)
checksums = st.one_of(
    st.text(st.sampled_from("0123456789abcdef"), min_size=32, max_size=32),
    st.text(st.sampled_from("0123456789abcdefABCDEF"), min_size=30, max_size=34),
    st.text(field_chars, max_size=36),
)
sizes = st.one_of(
    st.integers(0, 10**6).map(str),
    st.sampled_from([str(MAX_SIZE), str(MAX_SIZE + 1), "0" * 19 + "1", "9" * 19, "9" * 20, "007", "-1", "", "1e3"]),
    st.text(field_chars, max_size=4),
)
separators = st.sampled_from([" ", " ", " ", "  ", "\t", " \t"])
endings = st.sampled_from(["", "\n", "\r\n", " \n", "\r", "\n\n", "\t"])


def outcome(parse: object, line: str | bytes, rules: RecordRules) -> Record | str:
    try:
        return parse(line, rules)  # type: ignore[operator, no-any-return]
    except InvalidRecord as exc:
        return f"InvalidRecord: {exc}"


@settings(max_examples=1000, deadline=None)
@given(paths, checksums, sizes, separators, separators, endings, st.booleans(),
       st.sampled_from([RecordRules(), RecordRules(r"[0-9A-Fa-f]{30,34}"), RecordRules(r".+")]))
def test_every_line_parses_the_same_with_or_without_the_common_line_match(
    path: str, checksum: str, size: str, first: str, second: str, ending: str, as_bytes: bool, rules: RecordRules
) -> None:
    text = f"{path}{first}{checksum}{second}{size}{ending}"
    line: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    assert outcome(parse_line, line, rules) == outcome(_parse_line_fully, line, rules)


@pytest.mark.parametrize("line", [
    b"/noao-tuc-z1/mtn/20140708/ct15m/smarts/c15e_140708_232715_ori.hdr f45cc4c647913bc6e22df280c733758e 9922\n",
    "/data/a.fits f45cc4c647913bc6e22df280c733758e 0\r\n",
])
def test_a_seed_line_parses_to_its_fields(line: str | bytes) -> None:
    record = parse_line(line)
    assert record.checksum == "f45cc4c647913bc6e22df280c733758e"
    assert record.path.startswith("/") and record.size in (9922, 0)


def test_a_size_past_the_largest_file_size_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidRecord, match="larger than"):
        parse_line(f"/data/a f45cc4c647913bc6e22df280c733758e {MAX_SIZE + 1}\n".encode())


@pytest.mark.parametrize("line", [
    f"/data/a f45cc4c647913bc6e22df280c733758e {'9' * 5000}",
    f"/data/a f45cc4c647913bc6e22df280c733758e {'9' * 5000}".encode(),
    f'{{"path": "/data/a", "checksum": "f45cc4c647913bc6e22df280c733758e", "size": {"9" * 5000}}}',
])
def test_a_size_of_thousands_of_digits_is_refused_as_a_bad_record_with_a_short_reason(line: str | bytes) -> None:
    with pytest.raises(InvalidRecord) as refused:
        parse_line(line)
    assert len(str(refused.value)) < 200


def test_leading_zeros_do_not_make_a_size_too_large() -> None:
    assert parse_line(f"/data/a f45cc4c647913bc6e22df280c733758e {'0' * 30}7").size == 7


def test_an_id_outside_the_configured_pattern_is_refused_with_the_pattern() -> None:
    with pytest.raises(InvalidRecord, match="does not match the pattern"):
        parse_line(b"/data/a F45CC4C647913BC6E22DF280C733758E 5\n")


def test_a_hand_on_line_names_the_site_it_comes_from_and_strips_back_to_the_older_form() -> None:
    record = Record("/data/a b.fits", "0" * 32, 12)
    line = handon_line(record, "mountain")
    parsed = parse_line(line)
    assert (parsed.path, parsed.checksum, parsed.size, parsed.source) == (record.path, record.checksum, 12, "mountain")
    plain = form_for((line + "\n").encode(), LEGACY.capabilities)
    assert parse_line(plain) == record and b"site" not in plain
    assert form_for(b"/data/a.fits " + b"0" * 32 + b" 12\n", frozenset()) == b"/data/a.fits " + b"0" * 32 + b" 12\n"
    assert form_for((line + "\n").encode(), OURS) == (line + "\n").encode(), "a peer that speaks it all gets it all"


def test_a_peer_that_speaks_site_names_but_not_algorithms_gets_the_name_only() -> None:
    line = (handon_line(Record("/data/a.fits", "0" * 32, 12), "mountain") + "\n").encode()
    assert json.loads(form_for(line, frozenset({Capability.SITE}))) == {
        "path": "/data/a.fits", "checksum": "0" * 32, "size": 12, "site": "mountain"}


def test_a_hand_on_line_names_its_algorithm_and_has_no_older_form_unless_md5() -> None:
    record = Record("/data/a.fits", "0" * 32, 12)
    assert '"algorithm": "md5"' in handon_line(record, "mountain")
    fast = (handon_line(record, "mountain", "xxh128") + "\n").encode()
    assert json.loads(form_for(fast, frozenset())) == {
        "path": "/data/a.fits", "checksum": "0" * 32, "size": 12, "algorithm": "xxh128"}, \
        "a peer that does not speak algorithms knows md5 only: an xxh128 record must stay refused"


@pytest.mark.parametrize(("site", "message"), [(7, "site 7 is not a site name"),
                                               ("a b", 'site "a b" is not a site name'),
                                               ("x" * 65, "is not a site name")])
def test_a_hand_on_line_with_a_bad_site_name_is_refused_naming_it(site: object, message: str) -> None:
    line = json.dumps({"path": "/a", "checksum": "0" * 32, "size": 1, "site": site})
    with pytest.raises(InvalidRecord, match=message):
        parse_line(line)
    with pytest.raises(InvalidRecord, match="unknown JSON key 'sit'"):
        parse_line(json.dumps({"path": "/a", "checksum": "0" * 32, "size": 1, "sit": "x"}))


@pytest.mark.parametrize("line", [b'{"path": "/a", "checksum": "' + b"0" * 32 + b'", "size": 1.9, "site": "m"}\n',
                                  b'{"path": "/a", "checksum": "' + b"0" * 32 + b'", "size": true, "site": "m"}\n',
                                  b'{"checksum": "' + b"0" * 32 + b'", "size": 1, "site": "m"}\n',
                                  b'{"path": 7, "checksum": "x", "size": 1, "site": "m"}\n'])
def test_a_line_that_is_no_record_goes_as_it_is_for_the_daemon_to_refuse_saying_why(line: bytes) -> None:
    assert form_for(line, frozenset()) == line


def test_a_record_sent_again_says_so_on_every_line_it_travels_on() -> None:
    record = Record("/data/a.fits", "0" * 32, 12, again=True)
    fed = parse_line(format_line(record))
    assert fed.again and (fed.path, fed.checksum, fed.size) == (record.path, record.checksum, 12)
    handed = parse_line(handon_line(record, "mountain"))
    assert (handed.again, handed.source) == (True, "mountain")
    (stored,) = encode_stored([(record, "cli")], 1_795_000_000.0)
    assert decode_stored(record.checksum, stored).again
    assert not parse_line(json.dumps({"path": "/a", "checksum": "0" * 32, "size": 1, "again": False})).again


def test_a_peer_that_does_not_speak_again_gets_the_line_without_the_mark() -> None:
    line = (handon_line(Record("/data/a.fits", "0" * 32, 12, again=True), "mountain") + "\n").encode()
    assert json.loads(form_for(line, OURS))["again"] is True
    assert "again" not in json.loads(form_for(line, OURS - {Capability.AGAIN}))
    assert form_for(line, frozenset()) == b"/data/a.fits " + b"0" * 32 + b" 12\n"


@pytest.mark.parametrize("value", ["yes", 1, None, [True]])
def test_again_must_be_true_or_false(value: object) -> None:
    with pytest.raises(InvalidRecord, match=r"again .* is not true or false"):
        parse_line(json.dumps({"path": "/a", "checksum": "0" * 32, "size": 1, "again": value}))
