"""Pop daemons as real subprocesses (``dataq pop``) on a real redis-server: kill -9, SIGTERM, many daemons,
poison records, Redis restarts. No record may be lost; with no crash, each runs exactly once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from dataq.errors import StoreUnavailable
from dataq.record import Record
from dataq.store import Flag, QueueList, QueueStore
from testbed.waits import eventually, eventually_equal
from tests.conftest import MakeRedis
from tests.helpers import checksum_of, make_records, until_subscribed
from tests.pop_support import (
    MARKER,
    POISON,
    PopProcess,
    counter,
    executions,
    processes,
    runs_by_id,
    write_config,
)


def marker_config(tmp_path: Path, redis_url: str, seconds: float, **kw: object) -> tuple[Path, Path]:
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    config = write_config(tmp_path, redis_url, actions=[MARKER],
                          options={MARKER: {"dir": str(markers), "seconds": seconds}}, **kw)  # type: ignore[arg-type]
    return config, markers


async def marker_count(markers: Path) -> int:
    return len(executions(markers))


async def test_kill_9_mid_action_loses_nothing_and_the_records_run_again(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    records = make_records(8)
    await store.push_batch(records, source="t")
    config, markers = marker_config(tmp_path, redis_url, seconds=1.5)
    with processes() as started:
        first = PopProcess(config)
        started.append(first)
        await eventually_equal(lambda: marker_count(markers), 4, what="4 records running in the first daemon")
        first.kill()
        assert (await store.summary()).in_flight == 4  # still held by the dead worker
        interrupted = set(executions(markers))
        second = PopProcess(config)
        started.append(second)
        await eventually_equal(lambda: counter(store, "done"), 8, what="every record done")
        second.signal(signal.SIGTERM)
        assert await second.wait() == 0
    runs = runs_by_id(markers)
    assert set(runs) == {r.checksum for r in records}
    assert {record_id: runs[record_id] for record_id in interrupted} == dict.fromkeys(interrupted, 2)
    assert sum(runs.values()) == 12
    summary = await store.summary()
    assert (summary.tracked, summary.workers, summary.counters["reclaimed"]) == (0, 0, 4)


@pytest.mark.parametrize("daemons", [2, 4])
async def test_many_daemons_on_one_queue_run_every_record_exactly_once(
    store: QueueStore, redis_url: str, tmp_path: Path, daemons: int
) -> None:
    records = make_records(400)
    await store.push_batch(records, source="t")
    await store.set_flag(Flag.ACTION, False)  # so that every daemon is up before the first claim
    config, markers = marker_config(tmp_path, redis_url, seconds=0.02, log_level="warning")
    with processes() as started:
        started += [PopProcess(config) for _ in range(daemons)]
        for child in started:
            await child.registered(store)
        await until_subscribed(store, store.keys.notices, daemons)  # every daemon listening for notices
        await store.set_flag(Flag.ACTION, True)
        await eventually_equal(lambda: counter(store, "done"), 400, what="every record done")
        for child in started:
            child.signal(signal.SIGTERM)
        assert [await child.wait() for child in started] == [0] * daemons
    assert runs_by_id(markers) == dict.fromkeys((r.checksum for r in records), 1)
    pids = {name.split("-")[1] for name in (p.name for p in markers.iterdir())}
    assert pids == {str(child.pid) for child in started}  # the work was shared
    summary = await store.summary()
    assert (summary.tracked, summary.workers, summary.counters["claimed"]) == (0, 0, 400)


async def test_a_poison_record_that_kills_its_daemons_goes_inactive_after_max_crashes(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    poison = Record(path="/data/poison/c15e_140708_999999_ori.fits", checksum=checksum_of(999_999), size=1)
    records = make_records(6)
    await store.push_batch([*records[:3], poison, *records[3:]], source="t")
    markers = tmp_path / "markers"
    markers.mkdir()
    config = write_config(tmp_path, redis_url, actions=[POISON], options={POISON: {"dir": str(markers)}},
                          pop={"concurrency": 1, "max_crashes": 1})

    async def settled() -> bool:
        # A supervisor (systemd) restarts each daemon that dies.
        for index, child in enumerate(started):
            if not child.alive():
                child.kill()  # reaps it and closes its log
                started[index] = PopProcess(config)
        state = await store.record_state(poison.checksum)
        return state is not None and state.where == "inactive" and await counter(store, "done") == 6

    with processes() as started:
        started += [PopProcess(config), PopProcess(config)]
        await eventually(settled, what="the poison record inactive and the others done")
    state = await store.record_state(poison.checksum)
    assert state is not None
    assert (state.where, state.crashes) == ("inactive", 2)
    assert state.last_error is not None and "died while running it (2 crashes)" in state.last_error
    assert runs_by_id(markers)[poison.checksum] == 2
    assert await store.list_records(QueueList.ACTIVE) == []


async def sigterm_with_4_running(config: Path, markers: Path) -> None:
    """Start ``dataq pop``, SIGTERM it once 4 actions run; it must exit 0."""
    with processes() as started:
        daemon = PopProcess(config)
        started.append(daemon)
        await eventually_equal(lambda: marker_count(markers), 4, what="4 records running")
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0


async def test_sigterm_mid_action_lets_the_actions_finish_and_exits_0(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    await store.push_batch(make_records(4), source="t")
    config, markers = marker_config(tmp_path, redis_url, seconds=1.0, pop={"grace_period": 10.0})
    await sigterm_with_4_running(config, markers)
    summary = await store.summary()
    assert (summary.counters["done"], summary.tracked, summary.workers) == (4, 0, 0)


async def test_sigterm_after_the_grace_period_cancels_and_returns_the_records_next_in_line(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    records = make_records(6)
    await store.push_batch(records, source="t")
    config, markers = marker_config(tmp_path, redis_url, seconds=60.0, pop={"grace_period": 0.3})
    await sigterm_with_4_running(config, markers)
    summary = await store.summary()
    assert (summary.active, summary.in_flight, summary.workers, summary.counters.get("done", 0)) == (6, 0, 0, 0)
    next_to_run = [r.checksum for r in reversed(await store.list_records(QueueList.ACTIVE))]
    assert next_to_run == [r.checksum for r in records]


async def test_action_off_while_the_daemon_waits_then_a_push_claims_nothing_until_on(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    config, markers = marker_config(tmp_path, redis_url, seconds=0.0)
    with processes() as started:
        daemon = PopProcess(config)
        started.append(daemon)
        await daemon.registered(store)
        await until_subscribed(store, store.keys.notices)
        await store.set_flag(Flag.ACTION, False)
        await store.push_batch(make_records(5), source="t")
        await asyncio.sleep(1.5)  # the push woke it, and its poll interval has passed too
        assert (await counter(store, "claimed"), await marker_count(markers)) == (0, 0)
        await store.set_flag(Flag.ACTION, True)
        await eventually_equal(lambda: counter(store, "done"), 5, what="the records done once action is on")


async def test_a_redis_restart_mid_run_pauses_the_daemon_and_loses_no_record(
    make_redis: MakeRedis, tmp_path: Path
) -> None:
    server = make_redis()
    store = QueueStore.from_url(server.url, "transfer")
    try:
        records = make_records(120)
        await store.push_batch(records, source="t")
        config, markers = marker_config(tmp_path, server.url, seconds=0.05)
        with processes() as started:
            daemon = PopProcess(config)
            started.append(daemon)
            await eventually(lambda: _at_least(marker_count(markers), 20), what="20 records run")
            server.stop()
            await asyncio.sleep(1.5)
            assert daemon.alive()
            server.start()
            await eventually_equal(lambda: _done_or_none(store), 120, what="every record done after the restart")
            daemon.signal(signal.SIGTERM)
            assert await daemon.wait() == 0
        # Its own sweeper spares it (the outage expired its heartbeat), a lost claim or ack reply is recovered:
        # with no other daemon to take records back, each ran exactly once.
        assert runs_by_id(markers) == dict.fromkeys((r.checksum for r in records), 1)
        summary = await store.summary()
        assert (summary.tracked, summary.workers) == (0, 0)
    finally:
        await store.close()


async def _at_least(value: object, minimum: int) -> bool:
    return int(await value) >= minimum  # type: ignore[misc]


async def _done_or_none(store: QueueStore) -> int | None:
    try:
        return await counter(store, "done")
    except StoreUnavailable:  # the test's own connection from before the restart
        return None
