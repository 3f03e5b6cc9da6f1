"""A daemon with a bug in one of its parts stops, with a non-zero status, and keeps every record: systemd (or
``dataq run``) starts it afresh, rather than it running on without the part. And systemd's watchdog hears from
a daemon only while its main loop turns."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from dataq.pop.outcomes import OutcomeWriter
from dataq.push import daemon as push_daemon_module
from dataq.push.committer import Committer
from dataq.store import QueueStore
from testbed.waits import eventually_equal
from tests.conftest import MakeRedis
from tests.helpers import make_records
from tests.pop_support import MARKER, executions, load, pop_daemon, write_config
from tests.push_support import LineClient, push_settings, start_push

WAIT = 10.0


def broken(*args: object, **kwargs: object) -> None:
    raise RuntimeError("a bug")


async def test_a_push_daemon_whose_committer_fails_stops_with_status_1_and_acknowledges_nothing_it_lost(
    store: QueueStore, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Committer, "_answer", broken)  # stored, then the bug: before any reply
    daemon = await start_push(push_settings(redis_url, tmp_path / "data"))
    feeder = await LineClient.connect(daemon.port)
    record = make_records(1)[0]
    try:
        await feeder.send(record)
        assert await asyncio.wait_for(daemon.task, WAIT) == 1
        assert await feeder.closed_by_peer()  # no reply: the feeder sends it again to the restarted daemon
    finally:
        await feeder.close()
    state = await store.record_state(record.id)
    assert state is not None and state.where == "active"  # what Redis took stays queued


async def test_a_pop_daemon_whose_outcome_writer_fails_stops_with_status_1_and_the_record_stays_tracked(
    store: QueueStore, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setattr(OutcomeWriter, "_write_batch", broken)
    settings = load(write_config(tmp_path, redis_url, actions=[MARKER], options={MARKER: {"dir": str(markers)}}))
    record = make_records(1)[0]
    async with pop_daemon(settings) as daemon:
        await store.push_batch([record], source="t")
        assert await asyncio.wait_for(daemon.task, WAIT) == 1
    assert executions(markers) == [record.id]
    await eventually_equal(lambda: _where(store, record.id), "active", what="the record back in the queue")


async def _where(store: QueueStore, record_id: str) -> str | None:
    state = await store.record_state(record_id)
    return state.where if state else None


async def test_the_watchdog_is_fed_while_the_committer_idles_or_turns_and_not_while_it_is_stuck(
    store: QueueStore, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    monkeypatch.setenv("WATCHDOG_USEC", "100000")  # a ping every 50 ms
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.setattr(push_daemon_module, "STALL_AFTER", 0.3)
    release = asyncio.Event()
    real_push = QueueStore.push_records

    async def stuck_until_released(self: QueueStore, *args: Any, **kwargs: Any) -> Any:
        await release.wait()  # a Redis call that neither answers nor times out
        return await real_push(self, *args, **kwargs)

    monkeypatch.setattr(QueueStore, "push_records", stuck_until_released)
    loop = asyncio.get_running_loop()

    async def next_ping(timeout: float = WAIT) -> str:
        while True:
            message = (await asyncio.wait_for(loop.sock_recv(notify, 4096), timeout)).decode()
            if message == "WATCHDOG=1":
                return message

    def drained() -> None:
        with contextlib.suppress(BlockingIOError):
            while True:
                notify.recv(4096)

    daemon = await start_push(push_settings(redis_url, tmp_path / "data"))
    feeder = await LineClient.connect(daemon.port)
    try:
        started = loop.time()
        while loop.time() - started < 0.6:  # twice the stall limit with nothing to do: resting, not stalled
            await next_ping()
        with capture_logs() as logs:
            await feeder.send(make_records(1)[0])  # the committer now waits on Redis for good
            async with asyncio.timeout(WAIT):
                while not any(entry["event"].startswith("a main loop stalled") for entry in logs):
                    await asyncio.sleep(0.05)
        drained()
        with pytest.raises(TimeoutError):
            await next_ping(timeout=0.3)  # six intervals: no ping while the committer is stuck
        release.set()
        assert (await feeder.reply()).startswith("Pushed ID=")
        assert await next_ping() == "WATCHDOG=1"  # it turns again
    finally:
        release.set()
        await feeder.close()
        assert await daemon.shutdown() == 0
        notify.close()


async def test_a_push_daemon_rides_out_redis_refusing_writes_and_answers_once_it_accepts_them(
    make_redis: MakeRedis, tmp_path: Path
) -> None:
    server = make_redis()
    daemon = await start_push(push_settings(server.url, tmp_path / "data"))
    feeder = await LineClient.connect(daemon.port)
    admin = redis.Redis.from_url(server.url)
    record = make_records(1)[0]
    try:
        admin.config_set("maxmemory", 1)  # every write refused: "OOM command not allowed"
        await feeder.send(record)
        with pytest.raises(TimeoutError):
            await feeder.reply(timeout=1.0)  # ten heartbeats refused meanwhile: held, not answered, not dead
        assert not daemon.task.done()
        admin.config_set("maxmemory", 0)
        assert await feeder.reply() == f"Pushed ID={record.id}"
    finally:
        admin.close()
        await feeder.close()
    assert await daemon.shutdown() == 0
