"""``dataq push`` as a real subprocess: the original feeder, signals, restarts mid-feed, its log file."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from dataq.embedded.redis_server import free_port
from dataq.feed.client import Feeder
from dataq.record import format_line
from dataq.store import QueueStore
from tests.helpers import make_records
from tests.push_support import (
    active_ids,
    dataq_command,
    original_feeder,
    push_process,
    reply_for,
    write_push_config,
)


async def test_dataq_push_serves_the_original_feeder_logs_each_outcome_with_the_peer_and_exits_0_on_sigterm(
    tmp_path: Path, redis_url: str, store: QueueStore
) -> None:
    port = free_port()
    record = make_records(1)[0]
    with push_process(write_push_config(tmp_path, redis_url, port), port) as daemon:
        assert await asyncio.to_thread(original_feeder, port, format_line(record)) == reply_for(record) + "\n"
        assert await asyncio.to_thread(original_feeder, port, format_line(record)) == (
            reply_for(record, "Ignored") + "\n")
        assert (await asyncio.to_thread(original_feeder, port, "/a b")).startswith("Error: expected 3 fields")
        daemon.signal(signal.SIGTERM)
        assert await asyncio.to_thread(daemon.wait) == 0
        events = [json.loads(line) for line in daemon.log_lines()]
    assert await active_ids(store) == [record.checksum]
    by_event = {event["event"]: event for event in events}
    duplicate = by_event["ignored a duplicate: the id is already tracked"]
    refused = by_event["refused a record line"]
    assert duplicate["level"] == "warning" and duplicate["id"] == record.checksum
    assert duplicate["peer"].startswith("127.0.0.1:") and refused["peer"].startswith("127.0.0.1:")
    assert "expected 3 fields" in refused["error"]
    assert by_event["push daemon stopped"]["pushed"] == 1


async def test_a_daemon_stopped_mid_feed_answers_what_it_read_and_its_successor_takes_the_rest_exactly_once(
    tmp_path: Path, redis_url: str, store: QueueStore
) -> None:
    port = free_port()
    config = write_push_config(tmp_path, redis_url, port)
    records = make_records(6000)
    halfway = asyncio.Event()

    async def paced() -> AsyncIterator[str]:
        for index, record in enumerate(records):
            if index == 2000:
                halfway.set()
            if index % 200 == 0:
                await asyncio.sleep(0.01)
            yield format_line(record)

    with push_process(config, port) as first:
        feeding = asyncio.create_task(Feeder("127.0.0.1", port, window=500).feed(paced()))
        await halfway.wait()
        first.signal(signal.SIGTERM)
        assert await asyncio.to_thread(first.wait) == 0
    with push_process(config, port):
        result = await asyncio.wait_for(feeding, 60)
    assert result.errors == 0 and result.reconnects >= 1
    assert result.pushed + result.ignored == len(records)
    stored = await active_ids(store)
    assert len(stored) == len(set(stored)) == len(records)


async def test_dataq_push_refuses_to_start_on_a_port_in_use_with_a_one_line_error(
    tmp_path: Path, redis_url: str
) -> None:
    port = free_port()
    config = write_push_config(tmp_path, redis_url, port)
    with push_process(config, port):
        process = await asyncio.create_subprocess_exec(
            *dataq_command(), "push", "--config", str(config), stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1
    assert f"Error: cannot listen on 127.0.0.1:{port}" in err.decode()
