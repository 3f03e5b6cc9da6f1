"""The handshake, outcome by outcome: what a client learns of a push daemon from its answer to the hello, and what
the daemon makes of a hello. Each peer here is a few lines of asyncio on loopback that answers as one kind of
push daemon would."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from dataq import __version__
from dataq.errors import InvalidRecord, ProtocolError
from dataq.handshake import (
    LEGACY,
    MAX_HELLO_BYTES,
    OURS,
    Capability,
    Greeting,
    PeerBook,
    greet,
    hello_line,
    is_hello,
    parse_hello,
    read_answer,
)
from dataq.protocol import TOO_MANY_CONNECTIONS, error_reply
from dataq.record import parse_line

Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def peer(answer: Answer) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A connection to a server that calls ``answer`` with the first line it reads."""

    handlers: set[asyncio.Task[object]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            with contextlib.suppress(ConnectionError):
                await answer(await reader.readline(), writer)
                await writer.drain()
                await reader.read()  # holds the connection until the client closes it
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        server.close()
        for handler in handlers:
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


def saying(line: bytes) -> Answer:
    async def answer(_: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(line)

    return answer


def hello_of(speaks: list[str], version: str = "9.9.9") -> bytes:
    return json.dumps({"hello": "dataq", "version": version, "speaks": speaks}, separators=(",", ":")).encode() + b"\n"


async def test_a_daemon_that_speaks_everything_we_do_is_used_in_full() -> None:
    async with peer(saying(hello_line())) as (reader, writer):
        greeting = await greet(reader, writer, 5.0)
    assert greeting == Greeting(OURS, __version__) and greeting.full and not greeting.legacy


async def test_both_sides_use_what_both_speak_and_a_newer_daemons_extra_names_are_ignored() -> None:
    async with peer(saying(hello_of(["site", "receipts", "teleport"]))) as (reader, writer):
        greeting = await greet(reader, writer, 5.0)
    assert greeting.capabilities == {Capability.SITE, Capability.RECEIPTS}
    assert greeting.version == "9.9.9" and not greeting.full
    assert greeting.speaks(Capability.RECEIPTS) and not greeting.speaks(Capability.IDENTITY)


async def test_a_daemon_that_refuses_the_hello_as_a_record_is_legacy_whatever_its_words() -> None:
    for words in ("unknown JSON key 'hello'; expected only ['checksum', 'path', 'size']", "expected 3 fields",
                  "Unbekannter Schlüssel", ""):
        async with peer(saying(error_reply(words).encode())) as (reader, writer):
            assert await greet(reader, writer, 5.0) == LEGACY


async def test_a_daemon_that_answers_the_hello_with_a_pushed_reply_is_legacy_too() -> None:
    # No push daemon takes the hello for a record; whatever else a peer answers, it did not answer the handshake.
    async with peer(saying(b"Pushed ID=x\n")) as (reader, writer):
        assert await greet(reader, writer, 5.0) == LEGACY


async def test_a_full_daemon_refuses_the_connection_and_is_not_taken_for_an_older_one() -> None:
    async with peer(saying(error_reply(TOO_MANY_CONNECTIONS).encode())) as (reader, writer):
        with pytest.raises(ConnectionRefusedError):
            await greet(reader, writer, 5.0)


async def test_a_connection_closed_before_the_answer_is_a_lost_connection() -> None:
    async def hang_up(_: bytes, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async with peer(hang_up) as (reader, writer):
        with pytest.raises(ConnectionResetError, match="before the handshake was answered"):
            await greet(reader, writer, 5.0)


async def test_a_silent_daemon_times_out() -> None:
    async def silent(_: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    async with peer(silent) as (reader, writer):
        with pytest.raises(TimeoutError):
            await greet(reader, writer, 0.2)


@pytest.mark.parametrize("answer", [b'{"hello":"dataq","version":"1","speaks":"site"}\n',
                                    b'{"hello":"dataq","speaks":[]}\n', b'{"hello":\n',
                                    b'{"hello":"other","version":"1","speaks":[]}\n'])
async def test_a_malformed_hello_in_answer_is_a_protocol_error(answer: bytes) -> None:
    async with peer(saying(answer)) as (reader, writer):
        with pytest.raises(ProtocolError, match="malformed hello"):
            await greet(reader, writer, 5.0)


async def test_an_over_long_answer_is_a_protocol_error() -> None:
    async with peer(saying(b"Error: " + b"x" * MAX_HELLO_BYTES + b"\n")) as (reader, writer):
        with pytest.raises(ProtocolError, match="longer than"):
            await greet(reader, writer, 5.0)


def test_the_hello_is_one_word_that_no_dataq_and_no_2014_data_q_takes_for_a_record() -> None:
    line = hello_line()
    assert b" " not in line.rstrip(b"\n") and line.count(b"\n") == 1 and is_hello(line)
    with pytest.raises(InvalidRecord):
        parse_line(line)


def test_the_daemon_reads_what_a_client_speaks_and_answers_what_it_speaks() -> None:
    hello = parse_hello(hello_of(["identity", "warp"], "0.3.0"))
    assert hello.capabilities == {Capability.IDENTITY} and hello.version == "0.3.0" and hello.unknown == ("warp",)
    assert read_answer(hello.answer()) == Greeting(OURS, __version__)


@pytest.mark.parametrize(("line", "message"), [
    (b'{"hello":"dataq","version":"1","speaks":[1]}', "'speaks' must be a list of names"),
    (b'{"hello":"dataq","speaks":[]}', "'version' must be a version string"),
    (b'{"hello":"dataq","version":"' + b"9" * 65 + b'","speaks":[]}', "'version' must be a version string"),
    (b'{"hello":"nope","version":"1","speaks":[]}', "with 'hello': 'dataq'"),
    (b'{"hello" x', "hello: not a JSON object"),
])
def test_a_malformed_hello_is_refused_saying_what_is_wrong(line: bytes, message: str) -> None:
    with pytest.raises(InvalidRecord, match=message):
        parse_hello(line)


def test_each_next_site_keeps_what_it_said_last_and_an_upgrade_is_used_at_once() -> None:
    book = PeerBook()
    valley = book["valley:9988"]
    assert valley.speaks(Capability.RECEIPTS) is None, "nothing known before the first connection"
    valley.learned(LEGACY)
    assert valley.speaks(Capability.RECEIPTS) is False
    book["valley:9988"].learned(Greeting(OURS, "0.2.0"))
    assert valley.speaks(Capability.RECEIPTS) is True, "the next connection's handshake, no timer"
    assert book.known() == {"valley:9988": Greeting(OURS, "0.2.0")}
    assert "2014" in LEGACY.describe() and "receipts" in Greeting(OURS, "0.2.0").describe()


@pytest.mark.parametrize("answer", [b"+OK ready\n", b"\n", b"ERR unknown command\n"])
async def test_an_answer_that_is_no_reply_of_the_push_protocol_is_a_peer_without_the_handshake(answer: bytes) -> None:
    async with peer(saying(answer)) as (reader, writer):
        assert await greet(reader, writer, 5.0) == LEGACY
