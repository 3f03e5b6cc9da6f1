"""Each queue's state on the console, from the scenario that causes it: the conditions of the alert rules, read
from the same store calls as the daemons' gauges."""

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
from dataq.store import CustodyEntry, Flag, QueueStore
from dataq.web.console import Console
from dataq.web.server import make_app
from tests.helpers import make_records
from tests.web.conftest import TOKEN, WORKER, Web
from tests.web.test_api import fail_once, get

POP = {"role": "pop", "host": "host-1", "pid": 4242}


@pytest.fixture
async def strict(redis_url: str, tmp_path: Path) -> AsyncIterator[Web]:
    """The console with thresholds of a second or so, so that late and stalled backlogs show within a test."""
    config = tmp_path / "dataq.toml"
    config.write_text("[health]\nbacklog_old = 1.0\nstalled_after = 1.0\nreceipts_overdue = 1.0\n"
                      "[queues.transfer]\n")
    settings = load_settings(config, environ={})
    stores = {"transfer": QueueStore.from_url(redis_url, "transfer")}
    client = TestClient(TestServer(make_app(Console(settings, stores), TOKEN)))
    await client.start_server()
    yield Web(client, stores)
    await client.close()
    await stores["transfer"].close()


async def state(web: Web, queue: str = "transfer") -> tuple[str, list[str]]:
    doc = await get(web, f"/api/queues/{queue}")
    return doc["state"]["condition"], [found["condition"] for found in doc["conditions"]]


async def test_an_idle_queue_is_healthy_and_green(web: Web) -> None:
    doc = await get(web, "/api/queues/transfer")
    assert (doc["state"]["condition"], doc["state"]["severity"], doc["backlog_age_seconds"]) == ("healthy", "ok", None)
    html = await (await web.client.get("/")).text()
    assert '<span class="state state-ok" title="">healthy</span>' in html


async def test_a_backlog_nobody_works_on_is_stalled_and_old(strict: Web) -> None:
    await strict.transfer.push_batch(make_records(3), "test")
    assert await state(strict) == ("healthy", ["healthy"])
    await asyncio.sleep(1.2)
    condition, found = await state(strict)
    assert (condition, found) == ("stalled", ["stalled", "backlog_old"])
    doc = await get(strict, "/api/queues/transfer")
    assert doc["state"]["alert"] == "DataqQueueStalled" and doc["state"]["severity"] == "page"
    assert doc["backlog_age_seconds"] >= 1.2
    html = await (await strict.client.get("/")).text()
    assert 'class="severity-page"' in html and "3 active records and none done for 1 s" in html


async def test_a_paused_queue_says_so_and_is_not_called_late(strict: Web) -> None:
    await strict.transfer.push_batch(make_records(3), "test")
    await strict.transfer.set_flag(Flag.ACTION, False)
    await asyncio.sleep(1.2)
    assert await state(strict) == ("paused", ["paused"])


async def test_inactive_records_ask_for_an_operator(web: Web) -> None:
    await fail_once(web.transfer, 2, "disk full")
    doc = await get(web, "/api/queues/transfer")
    assert (doc["state"]["condition"], doc["state"]["severity"]) == ("inactive_records", "ticket")
    assert doc["state"]["detail"] == "2 inactive records wait for an operator"


async def beat(store: QueueStore, **heartbeat: Any) -> None:
    await store.heartbeat(WORKER, POP, heartbeat, ttl=30)


async def test_an_unreachable_destination_is_the_state_while_it_lasts(strict: Web) -> None:
    await strict.transfer.push_batch(make_records(2), "test")
    since = time.time() - 120
    await beat(strict.transfer, unreachable=[{"destination": "rsync://valley/in", "since": since,
                                              "error": "connection refused"}])
    await asyncio.sleep(1.2)
    doc = await get(strict, "/api/queues/transfer")
    assert [found["condition"] for found in doc["conditions"]] == ["destination_unreachable", "backlog_old"]
    assert doc["state"]["since"] == pytest.approx(since)
    assert "rsync://valley/in unreachable: connection refused" in doc["state"]["detail"]
    await beat(strict.transfer)
    assert (await state(strict))[0] == "stalled"


async def test_a_destination_outside_its_window_is_the_operators_plan(web: Web) -> None:
    await beat(web.transfer, outside_window=[{"destination": "rsync://valley/in", "windows": "19:00-07:00",
                                              "opens": time.time() + 600}])
    doc = await get(web, "/api/queues/transfer")
    assert (doc["state"]["condition"], doc["state"]["severity"]) == ("outside_window", "info")
    assert doc["state"]["detail"] == "rsync://valley/in is used only within 19:00-07:00"


async def test_receipts_waited_for_too_long_are_overdue(strict: Web) -> None:
    now = time.time()
    await strict.transfer.keep([CustodyEntry(make_records(1)[0], "valley:9988", now - 30)], first_ask=now,
                               now=now - 30)
    assert await state(strict) == ("receipts_overdue", ["receipts_overdue"])


async def test_an_audit_that_found_files_missing_shows_until_the_next_one(web: Web) -> None:
    await web.transfer.save_audit("dir:/data/2026-11-28", {"at": time.time(), "counts": {"arrived": 10,
                                                                                         "never_fed": 2}})
    doc = await get(web, "/api/queues/transfer")
    assert doc["state"]["condition"] == "audit_found_files"
    assert doc["state"]["detail"] == "the last audit of dir:/data/2026-11-28 found 2 never fed"
    await web.transfer.save_audit("dir:/data/2026-11-28", {"at": time.time(), "counts": {"arrived": 12}})
    assert (await state(web))[0] == "healthy"


async def test_a_queue_whose_redis_is_away_is_shown_as_such_among_the_others(redis_url: str) -> None:
    settings = load_settings(environ={})
    stores = {"transfer": QueueStore.from_url(redis_url, "transfer"),
              "ingest": QueueStore.from_url(f"redis://127.0.0.1:{free_port()}", "ingest", socket_timeout=1.0)}
    client = TestClient(TestServer(make_app(Console(settings, stores), TOKEN)))
    await client.start_server()
    try:
        response = await client.get("/api/queues")
        assert response.status == 200
        transfer, ingest = await response.json()
        assert (transfer["state"]["condition"], transfer["reachable"]) == ("healthy", True)
        assert (ingest["state"]["condition"], ingest["state"]["severity"], ingest["reachable"]) == \
            ("redis_down", "page", False)
        html = await (await client.get("/")).text()
        assert "redis down" in html
    finally:
        await client.close()
        for store in stores.values():
            await store.close()
