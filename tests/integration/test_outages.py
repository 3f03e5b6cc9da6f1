"""Outages are not failures: a pop daemon against a destination that goes away and comes back (a real rsync
daemon, real Redis), and against an action that says which of its failures are transient."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from dataq.actions import Action
from dataq.actions.testing import leave_mark
from dataq.cli.console import main as dataq_cli
from dataq.errors import Permanent, Retryable
from dataq.ops.documents import HELD_BACK_KEY
from dataq.ops.notices import KIND_REACHABLE, KIND_UNREACHABLE
from dataq.record import Record
from dataq.store import QueueList, QueueStore
from testbed.ports import unclaimed_port
from testbed.rsync import RsyncDaemon, rsync_daemon
from testbed.waits import eventually, eventually_equal
from tests.actions_support import LOOPBACK, PUSHED_DATE, make_file
from tests.pop_support import (
    RecordingNotifier,
    counter,
    executions,
    load,
    pop_daemon,
    write_config,
)

FAST_PROBES = {"unreachable_after": 2, "probe_delay": 0.2, "probe_max_delay": 0.4}
VALLEY = "valley"


@dataclass(frozen=True, slots=True)
class OutageOptions:
    dir: str
    down: str
    """While this file exists, the destination is down: every record fails as Retryable."""
    bad: tuple[str, ...] = ()
    """Records whose own data is wrong: they fail as Permanent, whether the destination is up or not."""


class OutageAction(Action[OutageOptions]):
    name = "outage"
    Options = OutageOptions

    def destination(self, record: Record) -> str | None:
        return VALLEY

    async def run(self, record: Record) -> None:
        leave_mark(self.options.dir, record)
        if record.id in self.options.bad:
            raise Permanent(f"record {record.id} is corrupt")
        if Path(self.options.down).exists():
            raise Retryable("connection refused")


async def dataq_cli_says(config: Path, *switches: str) -> str:
    """dataq-cli's output (it runs its own event loop, so in a thread of its own)."""
    result = await asyncio.to_thread(CliRunner().invoke, dataq_cli, ["--config", str(config), *switches])
    assert result.exit_code == 0, result.output
    return result.output


async def summary_of(config: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(await dataq_cli_says(config, "--summary", "--json"))
    return document


async def pushed_files(store: QueueStore, tmp_path: Path, count: int) -> tuple[list[Record], Path]:
    """``count`` small files in ``tmp_path/source``, their records pushed; and the valley's directory."""
    source = tmp_path / "source"
    source.mkdir()
    records = [make_file(source, f"f{i:03}.fits", f"data {i}".encode()) for i in range(count)]
    await store.push_batch(records, source="t")
    return records, tmp_path / "valley"


async def probes_failed(store: QueueStore, at_least: int) -> bool:
    for worker in await store.workers():
        for outage in (worker.heartbeat or {}).get("unreachable", []):  # type: ignore[union-attr]
            if outage["probes"] >= at_least:
                return True
    return False


async def test_an_rsync_daemon_down_for_longer_than_the_retries_would_last_sends_no_record_inactive(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    records, valley = await pushed_files(store, tmp_path, 5)
    port = unclaimed_port()  # down for a while: a port the kernel does not hand out meanwhile
    destination = f"rsync://{LOOPBACK}:{port}/{VALLEY}"
    config = write_config(tmp_path, redis_url, actions=["network_move"], queue={"max_errors": 1},
                          options={"network_move": {"destination": destination, "io_timeout": 5}}, pop=FAST_PROBES)
    notifier = RecordingNotifier()
    rsyncd = RsyncDaemon(tmp_path / "rsyncd", {VALLEY: valley})
    async with pop_daemon(load(config), notifier=notifier):
        await eventually(lambda: probes_failed(store, 4), what="four failed probes: max_errors=1 would be long spent")
        document = await summary_of(config)
        (outage,) = document["unreachable"]
        assert outage["destination"] == destination and outage["waiting"] == 5
        assert "exit status 10" in outage["error"]
        assert f"unreachable: {destination} since" in await dataq_cli_says(config, "--summary")
        assert (await store.summary()).inactive == 0
        assert all(state and state.errors == 0 for state in [await store.record_state(r.id) for r in records])
        rsyncd.start(port)
        try:
            await eventually_equal(lambda: counter(store, "done"), 5, what="every file sent once the daemon is up")
        finally:
            rsyncd.stop()
        assert (await summary_of(config))["unreachable"] == []
    for record in records:
        assert (valley / Path(record.path).name).read_bytes() == Path(record.path).read_bytes()
    assert [notice.kind for notice in notifier.notices] == [KIND_UNREACHABLE, KIND_REACHABLE]
    assert notifier.notices[0].details["destination"] == destination
    assert PUSHED_DATE  # the files were laid out by name only (the default layout)


async def test_a_daemon_that_takes_fewer_connections_than_the_batches_sent_at_once_is_no_outage(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    # network_move sends four batches at once; this daemon takes one connection at a time and refuses the rest
    # ("max connections (1) reached"). The action waits for its own connection instead: no record fails (and
    # runs again), no unreachable notice goes to the operators.
    records, valley = await pushed_files(store, tmp_path, 80)
    with rsync_daemon(tmp_path / "rsyncd", {VALLEY: valley}, max_connections=1) as rsyncd:
        config = write_config(tmp_path, redis_url, actions=["network_move"],
                              options={"network_move": {"destination": rsyncd.url(VALLEY), "batch_size": 10}},
                              pop=FAST_PROBES)
        notifier = RecordingNotifier()
        async with pop_daemon(load(config), notifier=notifier):
            await eventually_equal(lambda: counter(store, "done"), len(records), what="every file sent")
            # The operator sees why: the daemon takes fewer calls at once than network_move would open.
            async def held_back() -> object:
                (worker,) = json.loads(await dataq_cli_says(config, "--workers", "--json"))["workers"]
                return {destination: held["most"] for destination, held in worker[HELD_BACK_KEY].items()}

            await eventually_equal(held_back, {rsyncd.url(VALLEY): 4}, what="the destination held back")
    assert notifier.notices == []
    assert await counter(store, "claimed") == len(records), "no record failed and was run again"
    assert sorted(path.name for path in valley.iterdir()) == sorted(Path(r.path).name for r in records)


async def test_a_missing_source_file_still_ends_inactive_after_max_errors_with_its_error(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    source, valley = tmp_path / "source", tmp_path / "valley"
    source.mkdir()
    present = make_file(source, "here.fits", b"here")
    missing = make_file(source, "gone.fits", b"gone")
    Path(missing.path).unlink()
    await store.push_batch([present, missing], source="t")
    rsyncd = RsyncDaemon(tmp_path / "rsyncd", {VALLEY: valley})
    rsyncd.start()
    try:
        config = write_config(tmp_path, redis_url, actions=["network_move"], queue={"max_errors": 2},
                              options={"network_move": {"destination": rsyncd.url(VALLEY)}}, pop=FAST_PROBES)
        async with pop_daemon(load(config)):
            await eventually_equal(lambda: counter(store, "done"), 1, what="the present file sent")
            await eventually_equal(lambda: counter(store, "deactivated"), 1, what="the missing file given up")
    finally:
        rsyncd.stop()
    state = await store.record_state(missing.id)
    assert state is not None and state.where == "inactive" and state.errors == 3
    # network_move then asks the destination whether it holds the data already (it does not).
    error = f"network_move: source file {missing.path} does not exist; checking {rsyncd.url(VALLEY)}/gone.fits"
    assert state.last_error is not None and state.last_error.startswith(error)
    (line,) = (await dataq_cli_says(config, "--list", "inactive")).splitlines()
    assert line.startswith(f"{missing.id} : path={missing.path}, size={missing.size}, errors=3, error={error}")
    shown = await dataq_cli_says(config, "--show", missing.id)
    assert "where:      inactive" in shown and f"last error: {error}" in shown


async def test_a_permanent_failure_is_counted_at_once_while_the_destination_is_down_and_others_wait(
    store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    marks, down = tmp_path / "marks", tmp_path / "down"
    marks.mkdir()
    down.touch()
    bad, good = (make_file(tmp_path, name, name.encode()) for name in ("bad.fits", "good.fits"))
    await store.push_batch([bad, good], source="t")  # the first pushed runs first
    config = write_config(tmp_path, redis_url, actions=["tests.integration.test_outages:OutageAction"],
                          queue={"max_errors": 0}, pop={**FAST_PROBES, "concurrency": 1},
                          options={"tests.integration.test_outages:OutageAction": {
                              "dir": str(marks), "down": str(down), "bad": [bad.id]}})
    async with pop_daemon(load(config)):
        await eventually(lambda: probes_failed(store, 2), what="the destination probed twice")
        assert [r.id for r in await store.list_records(QueueList.INACTIVE)] == [bad.id]
        assert [r.id for r in await store.list_records(QueueList.ACTIVE)] == [good.id]
        good_state = await store.record_state(good.id)
        assert good_state is not None and (good_state.errors, good_state.last_error) == (
            0, "outage: connection refused")
        down.unlink()
        await eventually_equal(lambda: counter(store, "done"), 1,
                               what="the good record done once the destination is up")
    assert executions(marks).count(bad.id) == 1


async def test_records_keep_their_order_through_an_outage(store: QueueStore, redis_url: str, tmp_path: Path) -> None:
    marks, down = tmp_path / "marks", tmp_path / "down"
    marks.mkdir()
    down.touch()
    records = [make_file(tmp_path, f"r{i}.fits", bytes([i])) for i in range(6)]
    await store.push_batch(records, source="t")
    config = write_config(tmp_path, redis_url, actions=["tests.integration.test_outages:OutageAction"],
                          queue={"max_errors": 0}, pop={**FAST_PROBES, "concurrency": 1},
                          options={"tests.integration.test_outages:OutageAction": {
                              "dir": str(marks), "down": str(down)}})
    async with pop_daemon(load(config)):
        await eventually(lambda: probes_failed(store, 2), what="the destination probed twice")
        down.unlink()
        await eventually_equal(lambda: counter(store, "done"), 6, what="every record done")
    finished = [record_id for record_id in executions(marks)]
    last_runs = sorted(set(finished), key=lambda record_id: len(finished) - finished[::-1].index(record_id))
    assert last_runs == [r.id for r in records], "records finish in the order they were pushed"
