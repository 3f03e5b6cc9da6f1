"""The memory watermark: the push daemon turns ``read`` off when Redis's memory passes ``[push] max_memory`` and
back on below ``resume_memory``, with a notice each way; an operator's switch is never undone; a Redis outage is
waited out. Against a redis-server of the test's own with a small ``maxmemory``, and a push daemon checking the
memory every 0.1 s."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from dataq.embedded.redis_server import EmbeddedRedis
from dataq.ops.notices import KIND_READ_OFF, KIND_READ_ON
from dataq.push.daemon import PushDaemon
from dataq.push.gate import BLOCK_READ_OFF
from dataq.store import Flag, QueueStore
from testbed.waits import eventually
from tests.conftest import MakeRedis
from tests.pop_support import RecordingNotifier
from tests.push_support import QUEUE, STARTUP_TIMEOUT, push_settings

MIB = 2**20
MAXMEMORY = 32 * MIB
FILLER = {f"filler:{i}": b"x" * (2 * MIB) for i in range(10)}
"""20 MiB, in pieces (a query buffer counts as used memory too): pushes a near-empty Redis (about 1 MiB) past half
of MAXMEMORY."""
WATERMARK = {"max_memory": 0.5, "resume_memory": 0.25}
MEMORY_INTERVAL = 0.1
"""The daemons' memory check here (MEMORY_CHECK_INTERVAL is a second)."""


@pytest.fixture
async def small_redis(make_redis: MakeRedis) -> AsyncIterator[tuple[EmbeddedRedis, QueueStore]]:
    """A redis-server of the test's own with MAXMEMORY (kept across restarts) and no eviction; a store on it."""
    server = make_redis(extra_args=["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction"])
    store = QueueStore.from_url(server.url, QUEUE)
    yield server, store
    await store.close()


@contextlib.asynccontextmanager
async def push_daemon_on(server: EmbeddedRedis, tmp_path: Path, notifier: RecordingNotifier,
                         **push: Any) -> AsyncIterator[tuple[PushDaemon, asyncio.Task[int]]]:
    """A push daemon on the test's own Redis, posting to ``notifier``; stopped, and its exit checked, on exit."""
    stop = asyncio.Event()
    bound: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    settings = push_settings(server.url, tmp_path / "data", **push)
    store = QueueStore.open(settings, server.url, QUEUE)
    daemon = PushDaemon(settings, settings.queue(QUEUE), store, stop, notifier=notifier,
                        memory_interval=MEMORY_INTERVAL)
    task = asyncio.create_task(daemon.run(ready=bound.set_result))
    try:
        await asyncio.wait_for(bound, STARTUP_TIMEOUT)
        yield daemon, task
    finally:
        stop.set()
        try:
            assert await task == 0
        finally:
            await store.close()


def at_once(condition: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """A condition on the daemon's own state, as ``eventually`` polls it."""
    async def check() -> bool:
        return condition()
    return check


def memory_checked(daemon: PushDaemon, *, at_least: int = 0, below: int | None = None) -> Callable[[], Awaitable[bool]]:
    """Whether the daemon's last memory check (its decision taken) saw ``used_memory`` in [at_least, below)."""
    def seen() -> bool:
        used = daemon.cutoff.used_memory
        return used is not None and used >= at_least and (below is None or used < below)
    return at_once(seen)


async def read_is(store: QueueStore, on: bool) -> bool:
    return (await store.flags())[Flag.READ] is on


@dataclass
class Watched:
    """A push daemon watching the small Redis's memory (WATERMARK), reading; a store on that Redis; its notices."""

    server: EmbeddedRedis
    store: QueueStore
    notifier: RecordingNotifier
    daemon: PushDaemon
    task: asyncio.Task[int]


@pytest.fixture
async def watched(small_redis: tuple[EmbeddedRedis, QueueStore], tmp_path: Path) -> AsyncIterator[Watched]:
    server, store = small_redis
    notifier = RecordingNotifier()
    async with push_daemon_on(server, tmp_path, notifier, **WATERMARK) as (daemon, task):
        await eventually(at_once(lambda: daemon.gate.open))  # the flags read: reading feeders
        yield Watched(server, store, notifier, daemon, task)


async def test_memory_usage_is_redis_used_memory_and_maxmemory(small_redis: tuple[EmbeddedRedis, QueueStore],
                                                                make_redis: MakeRedis) -> None:
    _, store = small_redis
    used, maxmemory = await store.memory_usage()
    assert maxmemory == MAXMEMORY and 0 < used < MAXMEMORY // 4
    await store.r.mset(FILLER)
    assert (await store.memory_usage())[0] >= used + sum(map(len, FILLER.values()))
    unlimited = QueueStore.from_url(make_redis().url, QUEUE)
    try:
        assert (await unlimited.memory_usage())[1] == 0  # no maxmemory set
    finally:
        await unlimited.close()


async def test_memory_past_max_memory_turns_read_off_and_below_resume_memory_back_on(watched: Watched) -> None:
    store, notifier = watched.store, watched.notifier
    await store.r.mset(FILLER)
    await eventually(lambda: read_is(store, False))
    (off,) = notifier.notices
    assert off.kind == KIND_READ_OFF and "past the 16.0 MiB limit" in off.subject
    assert off.details["read_comes_back_on"] == "automatically once Redis uses less than 8.0 MiB"
    assert watched.daemon.gate.blocks(BLOCK_READ_OFF)  # and the daemon reads no feeder meanwhile
    await store.r.delete(*FILLER)
    await eventually(at_once(lambda: len(notifier.notices) == 2))
    assert await read_is(store, True) and watched.daemon.gate.open
    assert [notice.kind for notice in notifier.notices] == [KIND_READ_OFF, KIND_READ_ON]
    assert "below resume_memory" in notifier.notices[1].subject


async def test_an_operators_read_off_is_never_undone_by_the_memory_watch(watched: Watched) -> None:
    store, notifier, daemon = watched.store, watched.notifier, watched.daemon
    await store.set_flag(Flag.READ, False, who="operator")
    await eventually(at_once(lambda: not daemon.read.on))
    with capture_logs() as logs:
        await store.r.mset(FILLER)
        await eventually(memory_checked(daemon, at_least=MAXMEMORY // 2))  # a check saw it high, and let it be
        await store.r.delete(*FILLER)
        await eventually(memory_checked(daemon, below=MAXMEMORY // 4))  # ... and one low again
    assert await read_is(store, False)
    assert notifier.notices == []
    assert not [entry for entry in logs if "memory" in entry["event"]]  # nothing to say: not the daemon's switch


async def test_max_memory_in_bytes_needs_no_maxmemory(make_redis: MakeRedis, tmp_path: Path) -> None:
    server = make_redis()
    store = QueueStore.from_url(server.url, QUEUE)
    notifier = RecordingNotifier()
    used, maxmemory = await store.memory_usage()
    assert maxmemory == 0 and used > 0
    try:
        async with push_daemon_on(server, tmp_path, notifier, max_memory=float(used + 8 * MIB)):
            await eventually(lambda: read_is(store, True))
            await store.r.mset(FILLER)
            await eventually(lambda: read_is(store, False))
            await store.r.delete(*FILLER)
            await eventually(lambda: read_is(store, True))
    finally:
        await store.close()


async def test_a_fraction_of_a_redis_without_maxmemory_is_warned_about_once_and_not_watched(
    make_redis: MakeRedis, tmp_path: Path
) -> None:
    server = make_redis()
    store = QueueStore.from_url(server.url, QUEUE)
    notifier = RecordingNotifier()
    try:
        with capture_logs() as logs:
            async with push_daemon_on(server, tmp_path, notifier, max_memory=0.01) as (daemon, _):
                await eventually(lambda: read_is(store, True))
                await store.r.mset(FILLER)
                await eventually(memory_checked(daemon, at_least=sum(map(len, FILLER.values()))))
                assert await read_is(store, True)
        warnings = [entry for entry in logs if "maxmemory" in entry["event"]]
        assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
        assert "not watched" in warnings[0]["event"] and notifier.notices == []
    finally:
        await store.close()


async def test_the_memory_watch_waits_out_a_redis_outage_and_watches_on(watched: Watched) -> None:
    server, store, daemon = watched.server, watched.store, watched.daemon
    with capture_logs() as logs:
        server.stop()
        await eventually(at_once(lambda: any(
            entry["event"] == "redis unavailable" and entry.get("loop") == "push-memory" for entry in logs)))
        server.start()
    await store.r.connection_pool.disconnect()  # the test's own connections died with the server
    await store.r.mset(FILLER)
    await eventually(lambda: read_is(store, False))  # the same watch, still running, sees the memory high
    assert not watched.task.done() and daemon.supervisor.failed is None
    await store.r.delete(*FILLER)
    await eventually(lambda: read_is(store, True))
