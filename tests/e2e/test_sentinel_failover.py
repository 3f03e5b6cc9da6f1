"""High availability on Redis Sentinel, with real processes: a master, a replica and three sentinels on loopback.

The master is killed with SIGKILL while records flow; the sentinels promote the replica, every client follows by
itself, and nothing that was acknowledged is lost. The killed master is then started again, as systemd would, so
that ``min_replicas = 1`` can be met again (the sentinels make it a replica, or, with the tests' short down-after,
sometimes fail over once more to it: see :meth:`SentinelTopology.restart_killed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dataq.actions.testing import marks
from dataq.config.activity_settings import ActivitySettings
from dataq.feed.client import Feeder
from dataq.ops import daemon_ops
from dataq.store import QueueStore
from testbed.sentinel import SentinelTopology
from testbed.waits import eventually
from tests.cli_support import cli_with
from tests.helpers import make_records, scrape
from tests.pop_support import pop_daemon
from tests.push_support import LOOPBACK, every_record_pushed_and_active, feed_across, start_push
from tests.sentinel_support import (
    fail_over,
    ha_settings,
    open_ha_store,
    the_cli_pushes_and_shows_the_master_its_replica_and_every_sentinel,
    write_ha_config,
)

FEED_TIMEOUT = 180.0


@pytest.fixture
async def ha_store(sentinel_topology: SentinelTopology, tmp_path: Path) -> AsyncIterator[QueueStore]:
    # The activities of the slow action's test; the others' records are all default's.
    store = open_ha_store(ha_settings(sentinel_topology, tmp_path, activities={
        "science": ActivitySettings("science", ("*.fits",), share=3), "backfill": ActivitySettings("backfill")}))
    yield store
    await store.close()


async def test_a_pipelined_feed_completes_across_a_master_kill_and_every_pushed_record_is_on_the_new_master(
    sentinel_topology: SentinelTopology, ha_store: QueueStore, tmp_path: Path
) -> None:
    records = make_records(20_000)
    result = await feed_across(ha_settings(sentinel_topology, tmp_path), records,
                               lambda: fail_over(sentinel_topology), FEED_TIMEOUT)
    await every_record_pushed_and_active(result, records, ha_store)


async def test_a_pop_daemon_running_a_slow_action_finishes_every_record_across_a_master_kill(
    sentinel_topology: SentinelTopology, ha_store: QueueStore, tmp_path: Path
) -> None:
    marks_dir = tmp_path / "marks"
    marks_dir.mkdir()
    settings = ha_settings(sentinel_topology, tmp_path, actions=("mark",),
                           action_options={"mark": {"dir": str(marks_dir), "seconds": 0.05}},
                           activities={"science": ActivitySettings("science", ("*.fits",), share=3),
                                       "backfill": ActivitySettings("backfill")})
    records = make_records(300)
    # Half of them in an activity named by their feeder, half in one their path matches.
    records = [replace(r, activity="backfill") if n % 2 else replace(r, path=r.path.replace(".hdr", ".fits"))
               for n, r in enumerate(records)]
    await ha_store.push_batch(records, source="test")
    async with pop_daemon(settings, concurrency=8):

        async def running() -> bool:
            return len(marks(marks_dir)) >= 50

        await eventually(running, what="records running")
        await fail_over(sentinel_topology)

        async def settled() -> bool:
            summary = await ha_store.summary()
            return summary.tracked - summary.inactive == 0

        await eventually(settled, timeout=FEED_TIMEOUT, what="every record done or inactive")
    summary = await ha_store.summary()
    ran = marks(marks_dir)
    reruns = len(ran) - len(set(ran))
    print(f"re-runs after the fail-over: {reruns} of {len(records)} records")
    assert summary.inactive == 0
    assert set(ran) == {record.checksum for record in records}
    counters = await ha_store.counters()
    assert (counters["done@science"], counters["done@backfill"]) == (150, 150), "activities survive a fail-over"


def test_the_cli_finds_the_master_through_the_sentinels_and_shows_replicas_and_sentinels(
    sentinel_topology: SentinelTopology, tmp_path: Path
) -> None:
    run = cli_with(write_ha_config(sentinel_topology, tmp_path))
    the_cli_pushes_and_shows_the_master_its_replica_and_every_sentinel(run, sentinel_topology)
    info = run("--info")
    assert "role:" in info.output and "master" in info.output
    assert run("--health").exit_code in (0, 1)  # no daemon runs: unhealthy for that reason only
    assert "replica" not in run("--health").output


def test_health_fails_when_fewer_replicas_than_min_replicas_are_connected(
    sentinel_topology: SentinelTopology, tmp_path: Path
) -> None:
    health = cli_with(write_ha_config(sentinel_topology, tmp_path, min_replicas=2))("--health")
    assert health.exit_code == 1
    assert "only 1 replica(s) connected to the master" in health.output
    assert "min_replicas is 2" in health.output


async def test_one_sentinel_down_changes_nothing_but_a_warning(
    sentinel_topology: SentinelTopology, ha_store: QueueStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_ops, "REPLICATION_PROBE_INTERVAL", 0.1)
    sentinel_topology.kill_sentinel(0)
    with capture_logs() as logs:
        daemon = await start_push(ha_settings(sentinel_topology, tmp_path))
        try:
            result = await Feeder(LOOPBACK, daemon.port, window=10).feed(make_records(100))

            async def warned() -> bool:
                return any(entry["event"] == "replication degraded" for entry in logs)

            await eventually(warned)
            # The replication alert's metrics say the same: the master's replica is there, one problem is not.
            (url,) = [str(worker.info["metrics"]) for worker in await ha_store.workers()]
            scraped = await asyncio.to_thread(scrape, url)
            assert scraped[f'dataq_replication_replicas{{queue="{ha_store.queue}"}}'] == 1
            assert scraped[f'dataq_replication_problems{{queue="{ha_store.queue}"}}'] == 1
        finally:
            await daemon.shutdown()
    assert (result.pushed, result.errors) == (100, 0)
    warning = next(entry for entry in logs if entry["event"] == "replication degraded")
    assert warning["log_level"] == "warning"
    assert "do not answer (2 of 3 do)" in warning["problems"][0]
    summary = (await ha_store.summary())
    assert summary.active == 100
