"""The 2014 daemons' command lines, run as processes: ``dataq push --host --port --cfg --loglevel`` and ``dataq pop``
with the same switches (tests/integration/test_cli_2014_switches.py covers dataq-cli's and the refusals)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from dataq.embedded.redis_server import free_port
from dataq.record import format_line
from dataq.store import QueueStore
from testbed.waits import eventually
from tests.helpers import make_records
from tests.pop_support import counter, daemon_env
from tests.pop_support import write_config as write_pop_config
from tests.push_support import (
    WAIT_TIMEOUT,
    active_ids,
    dataq_command,
    original_feeder,
    reply_for,
    wait_listening,
    write_push_config,
)


def log_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@contextlib.asynccontextmanager
async def stopped_on_exit(process: subprocess.Popen[bytes]) -> AsyncIterator[None]:
    """On leaving the block: SIGTERM, and the daemon must exit 0 (killed instead if the block failed early)."""
    try:
        yield
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, WAIT_TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT_TIMEOUT)


async def test_dataq_push_listens_on_the_host_and_port_of_the_command_line_and_logs_at_its_level(
    tmp_path: Path, redis_url: str, store: QueueStore
) -> None:
    port = free_port()
    # Neither the settings' port nor the queue's own push_port: an explicit --port wins over both.
    config = write_push_config(tmp_path, redis_url, free_port())
    with config.open("a") as file:
        file.write(f"push_port = {free_port()}\n")  # under [queues.transfer], the file's last table
    record = make_records(1)[0]
    with open(tmp_path / "push.stderr", "wb") as stderr:
        process = subprocess.Popen(
            [*dataq_command(), "push", "--cfg", str(config), "--host", "127.0.0.1", "--port", str(port),
             "--loglevel", "DEBUG"], stdout=subprocess.DEVNULL, stderr=stderr)
    async with stopped_on_exit(process):
        wait_listening(port, process)
        assert await asyncio.to_thread(original_feeder, port, format_line(record)) == reply_for(record) + "\n"
    assert await active_ids(store) == [record.checksum]
    events = log_events(tmp_path / "log" / "push.log")
    listening = next(event for event in events if event["event"] == "push daemon listening")
    assert listening["listen"] == f"127.0.0.1:{port}"
    pushed = [event for event in events if event["event"] == "pushed"]  # a debug event: [log] level is info
    assert [(event["level"], event["id"]) for event in pushed] == [("debug", record.checksum)]


async def test_dataq_pop_runs_with_the_2014_switches_and_logs_at_their_level(
    tmp_path: Path, redis_url: str, store: QueueStore
) -> None:
    config = write_pop_config(tmp_path, redis_url, log_level="debug")
    records = make_records(2)
    await store.push_batch(records, source="test")
    # --host/--port as dataq_pop_svc.py took them: accepted, and nothing for a pop daemon to listen on.
    with open(tmp_path / "pop.stderr", "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", "from dataq.cli.main import main; main()", "pop", "--cfg", str(config),
             "--loglevel", "WARNING", "--host", "127.0.0.1", "--port", "9988"],
            env=daemon_env(), cwd="/", stdout=subprocess.DEVNULL, stderr=stderr)
    async with stopped_on_exit(process):
        async def all_done() -> bool:
            assert process.poll() is None, (tmp_path / "pop.stderr").read_text()
            return await counter(store, "done") == len(records)

        await eventually(all_done, what="the pop daemon to run both records")
    # [log] level debug would log its start, each record and its stop; --loglevel WARNING leaves none of them.
    levels = {event["level"] for event in log_events(tmp_path / "log" / "pop.log")}
    assert levels <= {"warning", "error"}
