"""``network_move`` times its rsync daemon's greeting before its first batch (:mod:`dataq.actions.round_trip`):
against a real daemon, directly and over the testbed's long link; anything that is not a daemon's greeting in
time tells nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from dataq.actions.round_trip import greeting_seconds
from testbed.link import LOOPBACK, Link
from testbed.ports import unclaimed_port
from testbed.rsync import RsyncDaemon


async def test_a_daemon_greets_a_round_trip_and_more_later_over_a_long_link_than_on_this_host(
        daemon: RsyncDaemon) -> None:
    here = await greeting_seconds(daemon.url("valley", "incoming"))
    link = Link((LOOPBACK, daemon.port), delay=0.05)
    port = await link.start()
    try:
        far = await greeting_seconds(f"rsync://{LOOPBACK}:{port}/valley/incoming")
    finally:
        await link.stop()
    assert here is not None and far is not None
    assert far >= 0.15, "the link's handshake round trip, then the greeting's way back: 3 × 50 ms at least"
    assert here < far


@pytest.fixture
async def talker() -> AsyncIterator[Callable[[bytes | None], Awaitable[int]]]:
    """Starts a TCP server that says ``first`` to each connection (None: nothing), on a loopback port."""
    servers: list[asyncio.Server] = []

    async def start(first: bytes | None) -> int:
        async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if first is not None:
                writer.write(first)
                await writer.drain()
            await reader.read()
            writer.close()

        server = await asyncio.start_server(greet, LOOPBACK, 0)
        servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_a_server_that_greets_as_no_rsync_daemon_does_tells_nothing(
        talker: Callable[[bytes | None], Awaitable[int]]) -> None:
    port = await talker(b"SSH-2.0-OpenSSH_9.2p1\r\n")
    assert await greeting_seconds(f"rsync://{LOOPBACK}:{port}/data") is None


async def test_a_server_that_says_nothing_tells_nothing_once_the_probe_gives_up(
        talker: Callable[[bytes | None], Awaitable[int]]) -> None:
    port = await talker(None)
    assert await greeting_seconds(f"rsync://{LOOPBACK}:{port}/data", within=0.3) is None


async def test_a_destination_nobody_listens_at_tells_nothing() -> None:
    assert await greeting_seconds(f"rsync://{LOOPBACK}:{unclaimed_port()}/data") is None
