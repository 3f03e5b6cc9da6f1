"""The push daemon while its Redis dies and comes back: nothing acknowledged is lost, nothing is doubled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from dataq.feed.client import Feeder
from dataq.protocol import ReplyKind
from dataq.push import committer
from dataq.store import QueueStore
from tests.conftest import MakeRedis
from tests.helpers import make_records
from tests.push_support import (
    QUEUE,
    LineClient,
    StartPush,
    active_ids,
    reply_for,
    stays_unanswered,
)


async def test_while_redis_is_down_lines_wait_unanswered_on_an_open_connection_until_it_is_back(
    push_daemon: StartPush, make_redis: MakeRedis
) -> None:
    server = make_redis()
    daemon = await push_daemon(url=server.url)
    first, second, third = make_records(3)
    client = await LineClient.connect(daemon.port)
    await client.send(first)
    assert await client.reply() == reply_for(first)
    server.kill()
    await client.send(second, third)
    assert await stays_unanswered(client, 1.0)
    server.start()
    assert await client.replies(2, timeout=15) == [reply_for(second), reply_for(third)]
    store = QueueStore.from_url(server.url, QUEUE)
    assert sorted(await active_ids(store)) == sorted(r.checksum for r in (first, second, third))
    await store.close()
    await client.close()


async def test_a_redis_crash_and_restart_mid_feed_loses_no_acknowledged_record_and_doubles_none(
    push_daemon: StartPush, make_redis: MakeRedis
) -> None:
    server = make_redis()
    daemon = await push_daemon(url=server.url, batch_max=50)
    records = make_records(3000)
    sent = asyncio.Event()

    async def paced() -> AsyncIterator[str]:
        for index, record in enumerate(records):
            if index == 1000:
                sent.set()
            if index % 100 == 0:
                await asyncio.sleep(0.01)
            yield f"{record.path} {record.checksum} {record.size}"

    feeder = Feeder("127.0.0.1", daemon.port, window=200)
    with capture_logs() as logs:
        feeding = asyncio.create_task(feeder.feed(paced()))
        await sent.wait()
        server.kill()  # SIGKILL: only what the AOF fsynced survives
        await asyncio.sleep(0.5)
        server.start()
        result = await asyncio.wait_for(feeding, 60)
    assert any(entry["event"].startswith("cannot store records") for entry in logs), "the crash hit no batch"
    assert result.errors == 0 and result.reconnects == 0
    # A write whose reply was lost in the crash is retried as the same write: still "Pushed", never "Ignored".
    assert result.replies is not None
    assert [reply.kind for reply in result.replies] == [ReplyKind.PUSHED] * len(records)
    store = QueueStore.from_url(server.url, QUEUE)
    stored = await active_ids(store)
    assert len(stored) == len(set(stored)) == len(records)
    assert (await store.counters())["pushed"] == len(records)
    await store.close()


async def test_a_daemon_started_while_redis_is_down_serves_once_redis_is_up(
    push_daemon: StartPush, make_redis: MakeRedis
) -> None:
    server = make_redis()
    url = server.url
    server.stop()
    daemon = await push_daemon(url=url)
    record = make_records(1)[0]
    client = await LineClient.connect(daemon.port)
    await client.send(record)
    assert await stays_unanswered(client, 0.5)
    server.start()
    assert await client.reply(timeout=15) == reply_for(record)
    await client.close()


async def test_a_backlog_past_its_limit_stops_reading_every_socket_until_it_drains(
    push_daemon: StartPush, make_redis: MakeRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(committer, "BACKLOG_LIMIT", 10)
    monkeypatch.setattr(committer, "BACKLOG_RESUME", 5)
    server = make_redis()
    daemon = await push_daemon(url=server.url)
    records = make_records(50)
    client = await LineClient.connect(daemon.port)
    await client.send(records[0])
    assert await client.reply() == reply_for(records[0])
    server.kill()
    with capture_logs() as logs:
        await client.send(*records[1:])
        assert await stays_unanswered(client, 0.5)
        server.start()
        assert await client.replies(49, timeout=15) == [reply_for(r) for r in records[1:]]
    closed = [e["blocked_by"] for e in logs if e["event"] == "not reading feeders"]
    assert any("committer backlog full" in reasons for reasons in closed)
    assert any(e["event"] == "reading feeders" for e in logs)
    await client.close()
