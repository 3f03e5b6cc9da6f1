"""Random byte lines never crash, hang or desynchronise the push daemon: one reply per line, in order."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from dataq.audit.arrived import ARRIVED_KEY, is_arrived_question
from dataq.audit.questions import AUDIT_KEY, is_question
from dataq.custody.receipts import parse_query
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.errors import InvalidRecord
from dataq.handshake import is_hello, parse_hello
from dataq.protocol import clean_message
from dataq.record import DEFAULT_RULES, format_line, parse_line
from tests.conftest import TEST_APPENDFSYNC
from tests.helpers import checksum_of, make_records
from tests.push_support import LOOPBACK, REPLY_TIMEOUT, push_settings, threaded_push

MAX_LINE = 256
GOOD = make_records(1)[0]

checksums = st.one_of(st.sampled_from([checksum_of(n) for n in range(50)]), st.text(max_size=40))
record_like = st.builds(
    lambda path, checksum, size, sep: sep.join([path, checksum, size]).encode("utf-8", "surrogatepass"),
    st.one_of(st.just("/data/file"), st.text(max_size=30).map(lambda t: "/" + t), st.text(max_size=30)),
    checksums,
    st.one_of(st.integers(-5, 10**20).map(str), st.text(max_size=5)),
    st.sampled_from([" ", "\t", "  ", " \r"]),
)
hello_like = st.builds(
    lambda speaks, version: b'{"hello":"dataq","version":' + version + b',"speaks":' + speaks + b"}",
    st.one_of(st.just(b'["site","receipts"]'), st.just(b'["fly"]'), st.just(b'"site"'), st.binary(max_size=10)),
    st.one_of(st.just(b'"0.9.1"'), st.just(b"7"), st.binary(max_size=5)),
)
lines = st.one_of(
    st.binary(max_size=MAX_LINE + 20),
    record_like,
    hello_like,
    st.binary(min_size=MAX_LINE - 2, max_size=MAX_LINE + 2),
).map(lambda line: line.replace(b"\n", b""))


@pytest.fixture(scope="module")
def fuzz_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A push daemon for the module, on a Redis of its own: the session's holds what the test before left there
    (``read`` switched off, say, which would leave every line unanswered)."""
    data_dir: Path = tmp_path_factory.mktemp("fuzz")
    server = EmbeddedRedis(data_dir / "redis", port=0, appendfsync=TEST_APPENDFSYNC)
    server.start()
    try:
        with threaded_push(push_settings(server.url, data_dir, max_line_bytes=MAX_LINE)) as port:
            yield port
    finally:
        server.stop()


def expected_reply(line: bytes) -> tuple[str, str]:
    """(reply prefix, rest) the protocol promises for ``line``: the record module decides what is valid."""
    if len(line) > MAX_LINE:
        return "Error: ", f"line longer than {MAX_LINE} bytes"
    try:
        if is_hello(line):
            return "hello", parse_hello(line).answer().decode().rstrip("\n")
        if is_question(line):
            parse_query(line, DEFAULT_RULES, AUDIT_KEY)
            reject()  # a well-formed audit question is answered with a line per id it names, not one
        if is_arrived_question(line):
            parse_query(line, DEFAULT_RULES, ARRIVED_KEY)
            reject()  # a well-formed arrived question makes its connection one of questions only
        record = parse_line(line)
    except InvalidRecord as exc:
        return "Error: ", clean_message(str(exc))
    return "ID=", record.checksum


def read_lines(sock: socket.socket, count: int) -> list[bytes]:
    buffer = b""
    while buffer.count(b"\n") < count:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed with {count} replies due, got {buffer!r}"
        buffer += chunk
    return buffer.split(b"\n")[:count]


# A hang makes every example and every shrinking step wait for REPLY_TIMEOUT, and hypothesis takes the signal
# pytest-timeout raises for a failure to shrink: the thread method ends the worker instead.
@pytest.mark.timeout(120, method="thread")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(lines, min_size=1, max_size=25))
def test_random_lines_each_get_exactly_one_reply_in_order_and_the_connection_stays_usable(
    fuzz_port: int, batch: list[bytes]
) -> None:
    with socket.create_connection((LOOPBACK, fuzz_port), timeout=REPLY_TIMEOUT) as sock:
        sock.sendall(b"".join(line + b"\n" for line in batch) + format_line(GOOD).encode() + b"\n")
        replies = read_lines(sock, len(batch) + 1)
    for line, reply in zip(batch, replies, strict=False):
        marker, rest = expected_reply(line)
        text = reply.decode()
        if marker == "Error: ":
            assert text == marker + rest, line
        elif marker == "hello":
            assert text == rest, line
        else:
            assert text in (f"Pushed ID={rest}", f"Ignored ID={rest}"), line
    assert replies[-1].decode() in (f"Pushed ID={GOOD.checksum}", f"Ignored ID={GOOD.checksum}")
