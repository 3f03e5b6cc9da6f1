"""Activities with real daemons on loopback: a feeder's records go through a push daemon into their activities,
and a pop daemon (a child process, so that it can be killed) serves them strict first, then by share."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from dataq.record import Record
from dataq.store import QueueStore
from testbed.waits import eventually
from tests.e2e.test_feed_command import dataq_feed
from tests.helpers import make_records
from tests.pop_support import QUEUE, PopProcess, load, processes, write_config
from tests.push_support import LineClient, RunningPush, start_push

ACTIVITIES = {
    "express": {"match": ["*/calib/*"], "strict": True},
    "science": {"match": ["*.fits"], "share": 3},
    "backfill": {"share": 1},
}


def settings_file(tmp_path: Path, redis_url: str, *, action: str = "sleep:0.02", concurrency: int = 4) -> Path:
    return write_config(tmp_path, redis_url, actions=(action,), activities=ACTIVITIES,
                        pop={"concurrency": concurrency},
                        push={"port": 0, "host": "127.0.0.1", "heartbeat_interval": 0.1, "heartbeat_ttl": 1.0})


def line(record: Record, activity: str | None = None) -> str:
    doc: dict[str, object] = {"path": record.path, "checksum": record.checksum, "size": record.size}
    if activity is not None:
        doc["activity"] = activity
    return json.dumps(doc)


def calib(count: int, start: int) -> list[Record]:
    return [Record(r.path.replace("/mtn/", "/mtn/calib/"), r.checksum, r.size) for r in make_records(count, start)]


def fits(count: int, start: int) -> list[Record]:
    return [Record(r.path.replace(".hdr", ".fits"), r.checksum, r.size) for r in make_records(count, start)]


async def push_lines(push: RunningPush, lines: Sequence[str]) -> list[str]:
    client = await LineClient.connect(push.port)
    try:
        replies: list[str] = []
        for first in range(0, len(lines), 1000):
            chunk = lines[first:first + 1000]
            await client.send(*chunk)
            replies += await client.replies(len(chunk))
        return replies
    finally:
        await client.close()


async def backfill_and_science(push: RunningPush, each: int) -> None:
    """``each`` records named backfill by their feeder, then ``each`` whose path science's globs fit."""
    await push_lines(push, [line(r, "backfill") for r in make_records(each)])
    await push_lines(push, [line(r) for r in fits(each, 100_000)])


@pytest.fixture
async def store(redis_url: str, tmp_path: Path) -> AsyncIterator[QueueStore]:
    store = QueueStore.open(load(settings_file(tmp_path, redis_url)), redis_url, QUEUE)
    yield store
    await store.close()


@contextlib.asynccontextmanager
async def push_daemon_of(config: Path) -> AsyncIterator[RunningPush]:
    """The push daemon of the settings file ``config``, in this event loop."""
    push = await start_push(load(config))
    try:
        yield push
    finally:
        await push.shutdown()


async def started_pop(started: list[PopProcess], config: Path, store: QueueStore) -> PopProcess:
    """``dataq pop --config config`` as a child process (killed at the end of ``processes()``), registered."""
    pop = PopProcess(config)
    started.append(pop)
    await pop.registered(store)
    return pop


async def done(store: QueueStore, activity: str) -> int:
    return (await store.counters()).get(f"done@{activity}", 0)


async def test_express_records_pushed_behind_a_backlog_are_all_done_while_the_backlog_still_waits(
        redis_url: str, tmp_path: Path, store: QueueStore) -> None:
    config = settings_file(tmp_path, redis_url)
    async with push_daemon_of(config) as push:
        replies = await push_lines(push, [line(r, "backfill") for r in make_records(10_000)])
        assert all(reply.startswith("Pushed") for reply in replies)
        with processes() as started:
            await started_pop(started, config, store)
            await eventually(lambda: _at_least(store, "backfill", 20), what="the backlog to start")
            # Matched by its path: the feeder names no activity.
            replies = await push_lines(push, [line(r) for r in calib(100, 20_000)])
            assert all(reply.startswith("Pushed") for reply in replies)
            await eventually(lambda: _at_least(store, "express", 100), timeout=60, what="every express record")
            waiting = (await store.summary()).activities
            assert waiting["express"] == 0
            assert waiting["backfill"] > 9_000


async def _at_least(store: QueueStore, activity: str, count: int) -> bool:
    return await done(store, activity) >= count


async def test_two_shares_with_work_queued_are_served_3_to_1_and_neither_starves(
        redis_url: str, tmp_path: Path, store: QueueStore) -> None:
    config = settings_file(tmp_path, redis_url, action="sleep:0.01", concurrency=2)
    async with push_daemon_of(config) as push:
        await backfill_and_science(push, 1_000)
        with processes() as started:
            pop = await started_pop(started, config, store)
            await eventually(lambda: _total_done(store, 400), timeout=60, what="400 records done")
            pop.signal(signal.SIGTERM)
            assert await pop.wait() == 0
        science, backfill = await done(store, "science"), await done(store, "backfill")
        assert 2.7 <= science / backfill <= 3.3, (science, backfill)


async def _total_done(store: QueueStore, count: int) -> bool:
    return (await store.counters()).get("done", 0) >= count


async def test_an_activity_the_queue_does_not_define_is_refused_on_the_wire_alone(
        redis_url: str, tmp_path: Path, store: QueueStore) -> None:
    async with push_daemon_of(settings_file(tmp_path, redis_url)) as push:
        first, second, third = make_records(3)
        replies = await push_lines(push, [line(first, "express"), line(second, "urgent"), line(third, "x y")])
        assert replies[0] == f"Pushed ID={first.checksum}"
        assert replies[1].startswith("Error: unknown activity 'urgent'; this queue's activities are: backfill, "
                                     "default, express, science")
        assert replies[2].startswith('Error: activity "x y" is not an activity name')
        assert (await store.summary()).activities["express"] == 1


async def test_records_of_a_killed_pop_daemon_go_back_to_their_activities_and_all_get_done(
        redis_url: str, tmp_path: Path, store: QueueStore) -> None:
    config = settings_file(tmp_path, redis_url, action="sleep:0.2", concurrency=8)
    async with push_daemon_of(config) as push:
        await backfill_and_science(push, 40)
        with processes() as started:
            pop = await started_pop(started, config, store)
            await eventually(lambda: _in_flight(store), what="records in flight")
            pop.signal(signal.SIGKILL)
            await pop.wait()
            await started_pop(started, config, store)
            await eventually(lambda: _total_done(store, 80), timeout=60, what="every record done")
        assert (await done(store, "backfill"), await done(store, "science")) == (40, 40)
        assert (await store.summary()).tracked == 0


async def _in_flight(store: QueueStore) -> bool:
    return (await store.summary()).in_flight >= 4


async def test_dataq_feed_names_the_activity_of_every_record_and_refuses_one_the_queue_lacks(
        redis_url: str, tmp_path: Path, store: QueueStore) -> None:
    config = settings_file(tmp_path, redis_url)
    async with push_daemon_of(config) as push:
        night = tmp_path / "night"
        night.mkdir()
        for n in range(3):
            (night / f"obj_{n}.fits").write_bytes(b"frame %d" % n)  # science's globs fit: the feeder decides
        status, out, err = await dataq_feed("--port", str(push.port), "--activity", "backfill", "--scan",
                                            str(night), config=config)
        assert status == 0, err
        assert out.startswith("pushed 3, ignored 0, errors 0")
        assert (await store.summary()).activities["backfill"] == 3
        status, _, err = await dataq_feed("--port", str(push.port), "--activity", "urgent", "--scan", str(night),
                                          config=config)
        assert status == 2
        assert "--activity: unknown activity 'urgent'; this queue's activities are: backfill, default, express" in err
