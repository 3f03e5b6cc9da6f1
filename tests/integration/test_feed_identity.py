"""A feeder sends the identity of a file that had settled before it hashed it, and the queue keeps it with the
record; a file just written goes without one (its actions hash it), and so does a record sent to a push daemon
older than the handshake. The same for the watching feeder (through its spool) and for ``dataq feed --scan``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from dataq.feed.command import feed_command
from dataq.file_identity import SETTLED_NS, identity_of
from dataq.record import DEFAULT_RULES
from dataq.store import QueueList, QueueStore
from testbed.waits import eventually
from tests.actions_support import LOOPBACK, OlderPeer
from tests.feed_support import StartFeeder, until_queued, until_spool_empty, write_file
from tests.push_support import WAIT_TIMEOUT, StartPush


async def test_a_settled_file_is_queued_with_its_identity_and_a_fresh_one_without(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    root = tmp_path / "incoming"
    write_file(root / "settled.fits", b"bias frame " * 100)
    await asyncio.sleep(SETTLED_NS / 1e9 + 0.2)
    fed = await feeder([(daemon.host, daemon.port)], root=root)
    write_file(fed.root / "fresh.fits", b"dark frame " * 100)
    await until_queued(store, 2)
    records = {os.path.basename(record.path): record for record in await store.list_records(QueueList.ACTIVE)}
    assert records["settled.fits"].identity == identity_of(os.stat(root / "settled.fits"))
    assert records["fresh.fits"].identity is None
    assert await fed.shutdown() == 0


async def test_a_push_daemon_older_than_identities_gets_the_record_without_one(
    feeder: StartFeeder, tmp_path: Path
) -> None:
    peer = OlderPeer()
    server = await asyncio.start_server(peer.serve, LOOPBACK, 0)
    try:
        root = tmp_path / "incoming"
        checksum = write_file(root / "settled.fits", b"bias frame " * 100)
        await asyncio.sleep(SETTLED_NS / 1e9 + 0.2)
        fed = await feeder([(LOOPBACK, server.sockets[0].getsockname()[1])], root=root)
        async def sent() -> bool:
            return len(peer.lines) == 1

        await eventually(sent, WAIT_TIMEOUT, what="the record sent without its identity")
        await until_spool_empty(fed)
        assert peer.lines == [f"{root / 'settled.fits'} {checksum} 1100\n".encode()]
        assert peer.hellos >= 1
        assert await fed.shutdown() == 0
    finally:
        server.close()


async def test_a_scan_sends_the_identity_of_its_settled_files_only(
    push_daemon: StartPush, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    write_file(tmp_path / "settled.fits", b"bias frame " * 100)
    await asyncio.sleep(SETTLED_NS / 1e9 + 0.2)
    write_file(tmp_path / "fresh.fits", b"dark frame " * 100)
    assert await scan_to(daemon.host, daemon.port, tmp_path) == 0
    records = {os.path.basename(record.path): record for record in await store.list_records(QueueList.ACTIVE)}
    assert records["settled.fits"].identity == identity_of(os.stat(tmp_path / "settled.fits"))
    assert records["fresh.fits"].identity is None


async def test_a_scan_sends_its_records_without_identities_to_a_push_daemon_older_than_them(tmp_path: Path) -> None:
    peer = OlderPeer()
    server = await asyncio.start_server(peer.serve, LOOPBACK, 0)
    try:
        checksum = write_file(tmp_path / "src" / "settled.fits", b"bias frame " * 100)
        await asyncio.sleep(SETTLED_NS / 1e9 + 0.2)
        assert await scan_to(LOOPBACK, server.sockets[0].getsockname()[1], tmp_path / "src") == 0
        assert peer.lines == [f"{tmp_path / 'src' / 'settled.fits'} {checksum} 1100\n".encode()], \
            "sent once, in the form it takes: it did not answer the handshake"
    finally:
        server.close()


async def scan_to(host: str, port: int, directory: Path) -> int:
    """``dataq feed --scan DIRECTORY`` to ``host:port``: its exit status."""
    return await feed_command(host=host, port=port, file=None, scan_dir=str(directory), window=10, tls_ca=None,
                              tls_cert=None, tls_key=None, rules=DEFAULT_RULES)
