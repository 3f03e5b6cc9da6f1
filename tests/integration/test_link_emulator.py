"""The long link of the testbed (:mod:`testbed.link`): bytes arrive whole and in order, no sooner than the delay,
the handshake and the bandwidth allow, a half-close passes through, and the far side gone closes the connection.

Only lower bounds of time are checked (the link never delivers early); how closely it keeps to its settings is
for the benchmarks that use it."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator

import pytest

from dataq.embedded.redis_server import free_port
from testbed.link import LOOPBACK, Link, link_process

DELAY = 0.05


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Sends back every byte, then the sha256 of all it got once the other side stops writing."""
    digest = hashlib.sha256()
    while data := await reader.read(65536):
        digest.update(data)
        writer.write(data)
        await writer.drain()
    writer.write(digest.hexdigest().encode())
    await writer.drain()
    writer.close()


@pytest.fixture
async def server() -> AsyncIterator[int]:
    running = await asyncio.start_server(echo, LOOPBACK, 0)
    yield running.sockets[0].getsockname()[1]
    running.close()
    await running.wait_closed()


async def exchange(port: int, payload: bytes) -> tuple[bytes, bytes, float, float]:
    """Send ``payload``, half-close, read everything back: (echo, digest line, seconds to the first byte, in all)."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(LOOPBACK, port)

    async def send() -> None:
        writer.write(payload)
        await writer.drain()
        writer.write_eof()

    sending = asyncio.create_task(send())
    first = await reader.readexactly(1)
    first_at = time.perf_counter() - started
    rest = await reader.read()
    await sending
    writer.close()
    back = first + rest
    return back[:len(payload)], back[len(payload):], first_at, time.perf_counter() - started


async def test_bytes_cross_whole_and_no_sooner_than_the_handshake_and_a_round_trip(server: int) -> None:
    link = Link((LOOPBACK, server), delay=DELAY)
    port = await link.start()
    try:
        payload = os.urandom(300_000)
        back, digest, first_at, _ = await exchange(port, payload)
        assert back == payload and digest == hashlib.sha256(payload).hexdigest().encode()
        # The connection's round trip (its handshake), then the first byte's way there and back.
        assert first_at >= 4 * DELAY * 0.95
    finally:
        await link.stop()


async def test_the_bandwidth_is_shared_by_the_connections_in_each_direction(server: int) -> None:
    link = Link((LOOPBACK, server), mbit=16)  # 2 MB/s each way
    port = await link.start()
    try:
        payloads = [os.urandom(1_000_000) for _ in range(2)]
        started = time.perf_counter()
        results = await asyncio.gather(*(exchange(port, payload) for payload in payloads))
        seconds = time.perf_counter() - started
        assert [back for back, *_ in results] == payloads
        assert seconds >= 2_000_000 / 2e6 * 0.95, f"2 MB at 2 MB/s together took {seconds:.2f} s"
    finally:
        await link.stop()


async def test_a_far_side_that_is_down_closes_the_connection() -> None:
    link = Link((LOOPBACK, free_port()), delay=DELAY)
    port = await link.start()
    try:
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        writer.write(b"hello\n")
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await link.stop()


async def test_a_link_in_its_own_process_relays_as_one_in_the_loop(server: int) -> None:
    with link_process((LOOPBACK, server), delay=DELAY, mbit=100) as port:
        payload = os.urandom(50_000)
        back, digest, first_at, _ = await exchange(port, payload)
        assert back == payload and digest == hashlib.sha256(payload).hexdigest().encode()
        assert first_at >= 4 * DELAY * 0.95
