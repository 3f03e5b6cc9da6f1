"""The push daemon's flow control and lifecycle: the read flag, the queue-size cut-off, connection limits,
idle connections, heartbeats and graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from structlog.testing import capture_logs

from dataq.store import Flag, QueueList, QueueStore
from testbed.waits import eventually
from tests.helpers import make_records
from tests.push_support import (
    LineClient,
    StartPush,
    active_ids,
    reply_for,
    stays_unanswered,
)

NOTICE_DELAY = 0.5
"""Ample time for a pub/sub notice to reach the daemon on loopback."""
SLOW_POLL = {"heartbeat_interval": 60.0, "heartbeat_ttl": 120.0}
"""Flags polled once at start only: a switch within the test can only come from a notice."""


async def test_read_off_stops_reading_and_read_on_resumes_at_once_without_losing_a_line(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon(**SLOW_POLL)
    first, *rest = make_records(2001)
    client = await LineClient.connect(daemon.port)
    await client.send(first)
    assert await client.reply() == reply_for(first)
    await store.set_flag(Flag.READ, False)
    await asyncio.sleep(NOTICE_DELAY)
    await client.send(*rest)
    assert await stays_unanswered(client, 0.5)
    assert await active_ids(store) == [first.checksum]
    await store.set_flag(Flag.READ, True)
    assert await client.replies(len(rest), timeout=5) == [reply_for(r) for r in rest]
    assert len(await active_ids(store)) == 2001
    await client.close()


async def test_a_daemon_started_with_read_off_reads_nothing_until_read_is_on(
    push_daemon: StartPush, store: QueueStore
) -> None:
    await store.set_flag(Flag.READ, False)
    daemon = await push_daemon()
    record = make_records(1)[0]
    client = await LineClient.connect(daemon.port)
    await client.send(record)
    assert await stays_unanswered(client, 0.5)
    await store.set_flag(Flag.READ, True)
    assert await client.reply() == reply_for(record)
    await client.close()


async def test_a_queue_past_max_queue_size_turns_read_off_and_logs_how_to_re_enable_it(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon(max_queue_size=5)
    records = make_records(8)
    client = await LineClient.connect(daemon.port)
    with capture_logs() as logs:
        for record in records[:6]:
            await client.send(record)
            assert await client.reply() == reply_for(record)
        await asyncio.sleep(NOTICE_DELAY)
        await client.send(records[6])
        assert await stays_unanswered(client, 0.5)
    assert (await store.flags())[Flag.READ] is False
    full = [entry for entry in logs if "dataq-cli --read on" in entry["event"]]
    assert full and full[0]["log_level"] == "warning" and full[0]["active"] == 6
    await store.set_flag(Flag.READ, True)  # the operator's way back
    assert await client.reply() == reply_for(records[6])
    await client.close()


async def test_read_comes_back_on_by_itself_once_the_queue_drains_below_resume_below(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon(max_queue_size=5, resume_below=3)
    records = make_records(7)
    client = await LineClient.connect(daemon.port)
    for record in records[:6]:
        await client.send(record)
        assert await client.reply() == reply_for(record)
    await asyncio.sleep(NOTICE_DELAY)
    await client.send(records[6])
    assert await stays_unanswered(client, 0.5)
    await store.delete(QueueList.ACTIVE, records[2].checksum, records[0].checksum)  # 3 left: not below 3
    assert await stays_unanswered(client, 0.5)
    await store.delete(QueueList.ACTIVE, records[3].checksum, records[3].checksum)  # 2 left
    assert await client.reply() == reply_for(records[6])
    assert (await store.flags())[Flag.READ] is True
    await client.close()


async def test_a_connection_past_max_connections_is_refused_politely_and_a_freed_slot_is_reused(
    push_daemon: StartPush,
) -> None:
    daemon = await push_daemon(max_connections=2)
    records = make_records(3)
    first, second = await LineClient.connect(daemon.port), await LineClient.connect(daemon.port)
    await first.send(records[0])
    await second.send(records[1])
    assert await first.reply() == reply_for(records[0]) and await second.reply() == reply_for(records[1])
    third = await LineClient.connect(daemon.port)
    assert await third.reply() == "Error: too many connections; try again later"
    assert await third.closed_by_peer()
    await first.close()
    await asyncio.sleep(0.1)
    fourth = await LineClient.connect(daemon.port)
    await fourth.send(records[2])
    assert await fourth.reply() == reply_for(records[2])
    for client in (second, third, fourth):
        await client.close()


async def test_an_idle_connection_is_closed_after_the_idle_timeout_but_a_busy_one_is_not(
    push_daemon: StartPush,
) -> None:
    daemon = await push_daemon(idle_timeout=0.4)
    idle, busy = await LineClient.connect(daemon.port), await LineClient.connect(daemon.port)
    for record in make_records(10):
        await busy.send(record)
        assert await busy.reply() == reply_for(record)
        await asyncio.sleep(0.1)
    assert await idle.closed_by_peer(timeout=0.1)
    await busy.close()
    await idle.close()


async def test_a_feeder_that_never_reads_its_replies_stops_being_read_and_is_then_closed(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon(idle_timeout=0.5)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # no autotuning: a few MB fill the path
    sock.connect(("127.0.0.1", daemon.port))
    sock.setblocking(False)
    client = LineClient(*await asyncio.open_connection(sock=sock))
    # Refused lines with ~1 KB replies fill the reply path quickly without touching Redis.
    bad = b"/a " + b"Z" * 1000 + b" 1\n"
    client.writer.transport.set_write_buffer_limits(high=1 << 30)
    client.writer.write(bad * 8_000)

    async def dropped() -> bool:  # seen from the daemon's heartbeat: the client itself never reads
        workers = await store.workers()
        beat = workers[0].heartbeat if workers else None
        return beat is not None and beat["accepted"] == 1 and beat["connections"] == 0

    await eventually(dropped, timeout=10)
    client.writer.transport.abort()


async def test_shutdown_stops_accepting_answers_every_line_already_read_then_closes(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon()
    records = make_records(3000)
    client = await LineClient.connect(daemon.port)
    client.writer.write(b"".join(f"{r.path} {r.checksum} {r.size}\n".encode() for r in records))
    assert await client.reply() == reply_for(records[0])
    assert await daemon.shutdown() == 0
    replies = [reply_for(records[0])]
    while line := await asyncio.wait_for(client.reader.readline(), 5):
        replies.append(line.decode().rstrip("\n"))
    # Every answer is for the next line in order, is stored, and nothing unanswered was stored.
    assert replies == [reply_for(r) for r in records[: len(replies)]]
    assert sorted(await active_ids(store)) == sorted(r.checksum for r in records[: len(replies)])
    with pytest.raises(OSError):
        await LineClient.connect(daemon.port)
    await client.close()


async def test_the_daemon_heartbeats_as_a_push_worker_and_leaves_the_registry_on_exit(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon()
    record = make_records(1)[0]
    client = await LineClient.connect(daemon.port)
    await client.send(record, "junk")
    await client.replies(2)

    async def beat_counts() -> bool:
        workers = await store.workers()
        beat = workers[0].heartbeat if workers else None
        return beat is not None and beat["pushed"] == 1 and beat["errors"] == 1 and beat["connections"] == 1

    await eventually(beat_counts)
    (worker,) = await store.workers()
    assert worker.info["role"] == "push" and worker.info["listen"] == f"127.0.0.1:{daemon.port}"
    await client.close()
    await daemon.shutdown()
    assert await store.workers() == []


async def test_every_push_is_logged_at_debug_and_every_duplicate_and_error_at_warning_with_the_peer(
    push_daemon: StartPush, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="dataq.push.committer")
    daemon = await push_daemon()
    record = make_records(1)[0]
    client = await LineClient.connect(daemon.port)
    peer = "{}:{}".format(*client.writer.get_extra_info("sockname")[:2])
    with capture_logs() as logs:
        await client.send(record, record, "junk")
        await client.replies(3)
    seen = {(entry["event"], entry["log_level"]): entry for entry in logs if entry.get("peer") == peer}
    assert seen["pushed", "debug"]["id"] == record.checksum
    assert seen["ignored a duplicate: the id is already tracked", "warning"]["id"] == record.checksum
    assert "expected 3 fields" in seen["refused a record line", "warning"]["error"]
    await client.close()
