"""The push daemon's line protocol against a real redis-server: replies, their order, and every bad input."""

from __future__ import annotations

import asyncio
import json

import pytest

from dataq import __version__
from dataq.errors import ProtocolError
from dataq.handshake import OURS, Greeting, hello_line, read_answer
from dataq.protocol import LineFramer, OverLong, ReplyKind, format_reply, parse_reply
from dataq.record import format_line
from dataq.store import QueueList, QueueStore
from tests.helpers import checksum_of, make_records
from tests.push_support import (
    LineClient,
    StartPush,
    active_ids,
    original_feeder,
    reply_for,
)

GOOD = make_records(1)[0]


async def test_the_original_feeder_gets_pushed_then_ignored_with_one_recv_per_connection(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon()
    line = format_line(GOOD)
    first = await asyncio.to_thread(original_feeder, daemon.port, line)
    second = await asyncio.to_thread(original_feeder, daemon.port, line)
    assert first == reply_for(GOOD) + "\n"
    assert second == reply_for(GOOD, "Ignored") + "\n"
    assert await active_ids(store) == [GOOD.checksum]


async def test_a_pipelined_feeder_gets_one_reply_per_line_in_line_order(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon(batch_max=7)
    records = make_records(500)
    client = await LineClient.connect(daemon.port)
    await client.send(*records[:250], "not-a-record", *records[250:], records[0])
    replies = await client.replies(502)
    assert replies[:250] == [reply_for(r) for r in records[:250]]
    assert replies[250] == "Error: expected 3 fields '<path> <checksum> <size>', got 1"
    assert replies[251:501] == [reply_for(r) for r in records[250:]]
    assert replies[501] == reply_for(records[0], "Ignored")
    assert sorted(await active_ids(store)) == sorted(r.checksum for r in records)
    await client.close()


async def test_a_stored_record_keeps_its_fields_and_the_feeder_address_as_source(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon()
    client = await LineClient.connect(daemon.port)
    await client.send(GOOD)
    assert await client.reply() == reply_for(GOOD)
    local_host, local_port = client.writer.get_extra_info("sockname")[:2]
    (stored,) = await store.list_records(QueueList.ACTIVE)
    assert (stored.path, stored.checksum, stored.size) == (GOOD.path, GOOD.checksum, GOOD.size)
    assert stored.source == f"{local_host}:{local_port}"
    assert stored.pushed_at is not None
    await client.close()


async def test_a_json_record_with_spaces_in_its_path_is_pushed(push_daemon: StartPush, store: QueueStore) -> None:
    daemon = await push_daemon()
    client = await LineClient.connect(daemon.port)
    await client.send(json.dumps({"path": "/data/night of 8 July/a b.fits", "checksum": checksum_of(1), "size": 5}))
    assert await client.reply() == f"Pushed ID={checksum_of(1)}"
    (stored,) = await store.list_records(QueueList.ACTIVE)
    assert stored.path == "/data/night of 8 July/a b.fits"
    await client.close()


BAD_LINES = [
    pytest.param(b"/a/b " + checksum_of(1).encode(), "expected 3 fields", id="two-fields"),
    pytest.param(b"/a/b c d " + checksum_of(1).encode(), "expected 3 fields", id="four-fields"),
    pytest.param(b"a/b " + checksum_of(1).encode() + b" 5", "is not absolute", id="relative-path"),
    pytest.param(b"/a/b XYZ 5", "does not match the pattern", id="bad-checksum"),
    pytest.param(b"/a/b " + checksum_of(1).encode() + b" -5", "size -5 is negative", id="negative-size"),
    pytest.param(b"/a/b " + checksum_of(1).encode() + b" 5.5", "not a non-negative integer", id="non-integer-size"),
    pytest.param(b'{"path": "/a", "checksum": "' + checksum_of(1).encode() + b'", "size": 1, "owner": "x"}',
                 "unknown JSON key 'owner'", id="unknown-json-key"),
    pytest.param(b'{"path": "/a", "checksum": "' + checksum_of(1).encode() + b'", "size": true}',
                 "is not an integer", id="json-boolean-size"),
    pytest.param(b"/caf\xe9 " + checksum_of(1).encode() + b" 5", "not valid UTF-8 (byte 0xe9 at offset 4)",
                 id="invalid-utf8"),
    pytest.param(b"{not json", "invalid JSON", id="invalid-json"),
    # Past Python's 4,300-digit limit on int(): once a ValueError that closed the connection (and with the loop's
    # exception handler, stopped the daemon).
    pytest.param(b"/a/b " + checksum_of(1).encode() + b" " + b"9" * 5000, "is larger than", id="5000-digit-size"),
    pytest.param(b'{"path": "/a", "checksum": "' + checksum_of(1).encode() + b'", "size": ' + b"9" * 5000 + b"}",
                 "invalid JSON: Exceeds the limit", id="5000-digit-json-size"),
    pytest.param(b"", "empty line", id="empty-line"),
    pytest.param(b"/a\x00b " + checksum_of(1).encode() + b" 5", "NUL", id="nul-in-path"),
]


@pytest.mark.parametrize(("line", "problem"), BAD_LINES)
async def test_a_bad_line_gets_an_error_naming_the_problem_and_the_connection_stays_usable(
    push_daemon: StartPush, store: QueueStore, line: bytes, problem: str
) -> None:
    daemon = await push_daemon()
    before, after = make_records(2)
    client = await LineClient.connect(daemon.port)
    await client.send(before, line, after)
    first, error, last = await client.replies(3)
    assert first == reply_for(before) and last == reply_for(after)
    assert error.startswith("Error: ") and problem in error
    assert sorted(await active_ids(store)) == sorted([before.checksum, after.checksum])
    await client.close()


async def test_an_over_long_line_gets_one_error_even_in_pieces_and_the_lines_around_it_are_stored(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon(max_line_bytes=256)
    before, after = make_records(2)
    client = await LineClient.connect(daemon.port)
    await client.send(before)
    for _ in range(10):  # 10,000 bytes in pieces: never buffered, answered once its newline comes
        await client.send_raw(b"/" + b"x" * 999)
    await client.send_raw(b" " + checksum_of(9).encode() + b" 1\n")
    await client.send(after)
    assert await client.replies(3) == [reply_for(before), "Error: line longer than 256 bytes", reply_for(after)]
    assert sorted(await active_ids(store)) == sorted([before.checksum, after.checksum])
    await client.close()


async def test_a_line_of_exactly_the_limit_is_accepted(push_daemon: StartPush) -> None:
    daemon = await push_daemon(max_line_bytes=256)
    tail = f" {checksum_of(3)} 7"
    line = "/" + "p" * (256 - 1 - len(tail)) + tail
    assert len(line.encode()) == 256
    client = await LineClient.connect(daemon.port)
    await client.send(line, line + "x")
    assert await client.replies(2) == [f"Pushed ID={checksum_of(3)}", "Error: line longer than 256 bytes"]
    await client.close()


async def test_crlf_line_ends_are_accepted(push_daemon: StartPush) -> None:
    daemon = await push_daemon()
    client = await LineClient.connect(daemon.port)
    await client.send_raw(format_line(GOOD).encode() + b"\r\n")
    assert await client.reply() == reply_for(GOOD)
    await client.close()


async def test_a_last_line_without_its_newline_is_answered_when_the_feeder_stops_writing(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon()
    client = await LineClient.connect(daemon.port)
    await client.send_raw(format_line(GOOD).encode())
    client.writer.write_eof()
    assert await client.reply() == reply_for(GOOD)
    assert await client.closed_by_peer()
    assert await active_ids(store) == [GOOD.checksum]
    await client.close()


async def test_a_long_error_reply_is_cut_to_one_bounded_line(push_daemon: StartPush) -> None:
    daemon = await push_daemon()
    client = await LineClient.connect(daemon.port)
    await client.send("/a " + "Z" * 5000 + " 1", GOOD)
    error, pushed = await client.replies(2)
    assert error.startswith("Error: checksum 'ZZZ") and error.endswith("...") and len(error) < 1100
    assert pushed == reply_for(GOOD)
    await client.close()


# --- the framing and reply helpers both ends share ------------------------------------------------------------


def test_the_framer_returns_lines_split_anywhere_in_order_and_drops_over_long_ones_as_they_come() -> None:
    framer = LineFramer(max_bytes=5)
    out: list[bytes | OverLong] = []
    for piece in (b"ab", b"c\nde", b"f\n1234567", b"89", b"\nxy\n", b"tail"):
        out += framer.feed(piece)
    assert out[:3] == [b"abc", b"def", out[2]] and isinstance(out[2], OverLong) and out[2].length == 9
    assert out[3:] == [b"xy"]
    assert framer.pending and framer.finish() == b"tail" and not framer.pending


def test_the_framer_reports_an_unfinished_over_long_line_at_the_end_and_can_drop_a_partial_one() -> None:
    framer = LineFramer(max_bytes=3)
    assert framer.feed(b"abcdef") == []
    assert isinstance(framer.finish(), OverLong)
    assert framer.feed(b"ab") == [] and framer.drop_partial() and framer.finish() is None


@pytest.mark.parametrize(
    ("line", "kind", "detail"),
    [
        (b"Pushed ID=abc\n", ReplyKind.PUSHED, "abc"),
        (b"Ignored ID=abc", ReplyKind.IGNORED, "abc"),
        (b"Error: size -1 is negative\r\n", ReplyKind.ERROR, "size -1 is negative"),
    ],
)
def test_every_reply_kind_parses_back_to_what_was_formatted(line: bytes, kind: ReplyKind, detail: str) -> None:
    reply = parse_reply(line)
    assert (reply.kind, reply.detail) == (kind, detail)
    assert format_reply(kind, detail) == line.decode().rstrip("\r\n") + "\n"


def test_an_unknown_reply_is_a_protocol_error_and_an_error_text_never_breaks_the_line() -> None:
    with pytest.raises(ProtocolError):
        parse_reply(b"OK\n")
    assert format_reply(ReplyKind.ERROR, "two\nlines") == "Error: two\\nlines\n"


async def test_a_hello_is_answered_with_what_the_daemon_speaks_in_its_place_among_the_lines(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon()
    records = make_records(3)
    answer = hello_line().decode().rstrip("\n")
    client = await LineClient.connect(daemon.port)
    # First on its connection (answered at once), then between records (answered in its place).
    await client.send(hello_line().decode().rstrip("\n"), records[0], hello_line().decode().rstrip("\n"), records[1],
                      '{"hello":"dataq","speaks":"all"}', records[2])
    replies = await client.replies(6)
    assert replies[0] == answer and replies[2] == answer
    assert read_answer(replies[0].encode()) == Greeting(OURS, __version__)
    assert [replies[1], replies[3], replies[5]] == [reply_for(record) for record in records]
    assert replies[4] == "Error: hello: 'speaks' must be a list of names"
    assert sorted(await active_ids(store)) == sorted(record.checksum for record in records), "a hello stores nothing"
    await client.close()
