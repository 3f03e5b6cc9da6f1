"""The console's panels beyond the queues: each destination with its state, connections and the tuner's decision;
each audited target with its findings and a repair started from the page; each feeder with its spool and link."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dataq.config import load_settings
from dataq.embedded.redis_server import free_port
from dataq.store import QueueStore
from dataq.web.console import Console
from dataq.web.server import make_app
from testbed.waits import eventually
from tests.cascade_support import make_sources
from tests.e2e.test_feed_metrics import feeder
from tests.feed_support import write_file
from tests.push_support import dataq_command
from tests.web.conftest import TOKEN, WORKER, Web
from tests.web.test_api import get, post

QUEUE = "night"
POP = {"role": "pop", "host": "host-1", "pid": 4242}
VALLEY = "rsync://127.0.0.1:8873/incoming"


@pytest.fixture
async def site(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[Web, Path]]:
    """The console of a lone site with a settings file (what a repair runs with): (console, the file)."""
    config = tmp_path / "dataq.toml"
    config.write_text(
        f'site = "mountain"\ndata_dir = "{tmp_path / "data"}"\n[redis]\nurl = "{redis_url}"\n'
        f'[feed]\nsettle = 0\n[web]\nfeeders = ["127.0.0.1:{free_port()}"]\n'
        f'[queues.{QUEUE}]\nactions = ["network_move"]\nmax_errors = 0\n'
        f'[queues.{QUEUE}.network_move]\ndestination = "{VALLEY}"\nmax_connections = 4\n'
        f'windows = ["19:00-07:00"]\n')
    settings = load_settings(config, environ={})
    stores = {QUEUE: QueueStore.open(settings, redis_url, QUEUE)}
    client = TestClient(TestServer(make_app(Console(settings, stores), TOKEN)))
    await client.start_server()
    yield Web(client, stores), config
    await client.close()
    await stores[QUEUE].close()


async def test_each_destination_shows_its_state_connections_tuner_and_limits(site: tuple[Web, Path]) -> None:
    web, _ = site
    (row,) = await get(web, f"/api/queues/{QUEUE}/destinations")
    assert (row["destination"], row["action"], row["state"]) == (VALLEY, "network_move", "no pop daemon")
    assert row["limits"] == {"max_connections": 4, "windows": "19:00-07:00"}
    since = time.time() - 90
    await web.stores[QUEUE].heartbeat(WORKER, POP, {
        "unreachable": [{"destination": VALLEY, "since": since, "error": "connection refused"}],
        "batch_tuning": {VALLEY: {"batch_size": 64, "least": 16, "most": 1000, "overhead_seconds": 0.31,
                                  "rate_bytes_per_second": 48_000_000, "decision": "grew: calls are mostly waiting",
                                  "decided_at": since + 30}},
        "connections_held_back": {VALLEY: {"at_once": 2, "most": 4}},
        "connections_open": {VALLEY: {"open": 1, "most": 4}}}, ttl=30)
    await web.stores[QUEUE].heartbeat(f"{WORKER}-2", POP, {"connections_open": {VALLEY: {"open": 2, "most": 4}}},
                                      ttl=30)
    (row,) = await get(web, f"/api/queues/{QUEUE}/destinations")
    assert (row["state"], row["error"], row["since"]) == ("unreachable", "connection refused", pytest.approx(since))
    assert row["for_seconds"] >= 90 and row["held_back"] == {"at_once": 2, "most": 4}
    assert row["open"] == {"open": 3, "most": 8}, "the calls open of every pop daemon"
    html = await (await web.client.get(f"/queues/{QUEUE}")).text()
    section = html[html.index('id="destinations"'):html.index('id="audits"')]
    assert "unreachable for 90 s" in section and "connection refused" in section
    assert "64 records (16-1000); link 48.0 MB/s, 310 ms a call" in section
    assert "grew: calls are mostly waiting" in section and "3 open of 8; held to 2 of 4 by the daemon" in section
    assert "max_connections = 4; windows = 19:00-07:00" in section


async def audits(web: Web) -> list[dict[str, Any]]:
    return await get(web, f"/api/queues/{QUEUE}/audits")  # type: ignore[no-any-return]


async def test_an_audits_findings_are_listed_and_repaired_from_the_console_within_the_brakes(
        site: tuple[Web, Path], tmp_path: Path) -> None:
    web, config = site
    night = tmp_path / "night"
    make_sources(night, 3)
    audit_run = await asyncio.create_subprocess_exec(*dataq_command(), "audit", "--config", str(config), "--queue",
                                                     QUEUE, str(night), stdout=asyncio.subprocess.DEVNULL)
    assert await audit_run.wait() == 1, "found: three files never fed"
    (audit,) = await audits(web)
    assert (audit["target"], audit["files"], audit["counts"]) == (f"dir:{night}", 3, {"never_fed": 3})
    assert {(f["class"], f["site"]) for f in audit["findings"]} == {("never_fed", "mountain")}
    assert audit["findings_total"] == 3 and audit["repair"] is None

    started = await post(web, f"/api/queues/{QUEUE}/repair", {"target": f"dir:{night}"})
    assert started["running"] is True and started["who"].startswith("bearer@")
    again = await post(web, f"/api/queues/{QUEUE}/repair", {"target": f"dir:{night}"}, status=409)
    assert "is being repaired since" in again["error"]

    async def ended() -> bool:
        (item,) = await audits(web)
        return item["repair"] is not None and not item["repair"]["running"]

    await eventually(ended, timeout=60, what="the repair to end")
    (audit,) = await audits(web)
    assert (audit["repair"]["status"], audit["repair"]["meaning"]) == (1, "repaired what it could; see what it found")
    assert audit["repaired"] == 3 and (await web.stores[QUEUE].summary()).active == 3, "the files fed"
    assert any("never_fed" in line for line in audit["repair"]["output"])
    html = await (await web.client.get(f"/queues/{QUEUE}")).text()
    assert "ended with status 1 (repaired what it could; see what it found)" in html and "3 repaired" in html


async def test_a_repair_of_a_target_never_audited_is_refused(site: tuple[Web, Path]) -> None:
    web, _ = site
    refused = await post(web, f"/api/queues/{QUEUE}/repair", {"target": "dir:/elsewhere"}, status=409)
    assert refused["error"] == f"no audit of 'dir:/elsewhere' is known for queue '{QUEUE}': audit it first"
    assert (await post(web, f"/api/queues/{QUEUE}/repair", {"target": "x"}, status=401, headers={}))["error"]


async def test_a_repair_needs_a_settings_file(web: Web) -> None:
    await web.transfer.save_audit("dir:/data", {"at": time.time(), "counts": {"never_fed": 1}})
    refused = await post(web, "/api/queues/transfer/repair", {"target": "dir:/data"}, status=409)
    assert "without a settings file" in refused["error"]


async def test_each_feeder_shows_its_spool_and_link_or_that_it_does_not_report(
        site: tuple[Web, Path], tmp_path: Path) -> None:
    web, config = site
    metrics_port = free_port()
    text = config.read_text().replace('feeders = ["', f'feeders = ["127.0.0.1:{metrics_port}", "')
    config.write_text(text)
    console = Console(load_settings(config, environ={}), web.stores)
    async with feeder(tmp_path, free_port(), metrics_port) as watched:  # its push daemon is not there
        write_file(watched / "obs_0001.fits", b"photons")

        async def spooled() -> bool:
            views = {view["address"]: view for view in await console.feeders()}
            rows = views[f"127.0.0.1:{metrics_port}"]["directories"]
            return any(row["pending"] == 1 for row in rows)

        await eventually(spooled, timeout=30, what="the file in the feeder's spool")
        live, dead = await console.feeders()
    (row,) = [row for row in live["directories"] if row["directory"] == str(watched)]
    assert (live["reporting"], row["connected"], row["last_acknowledged_age_seconds"]) == (True, False, None)
    assert row["oldest_pending_age_seconds"] >= 0 and row["refused"] == 0
    assert (dead["reporting"], dead["directories"]) == (False, [])
    assert "its endpoint does not answer" in dead["error"]
