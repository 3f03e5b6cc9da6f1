"""The whole suite as operators run it: ``dataq run`` on the embedded default, and daemons under a service
manager (systemd's notify socket, the metrics endpoint)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataq.embedded.redis_server import find_running, free_port
from dataq.feed.client import Feeder
from dataq.ops.daemon_ops import REDIS_PROBE_INTERVAL
from dataq.ops.exported import EXPORTED_METRICS
from dataq.runtime.systemd import path_instance
from dataq.store import Flag, QueueStore
from testbed.waits import eventually
from tests.helpers import make_records, scrape
from tests.pop_support import daemon_env

DATAQ = [sys.executable, "-c", "from dataq.cli.main import main; main()"]


def suite_config(tmp_path: Path, port: int, redis_url: str | None = None) -> Path:
    lines = [f'data_dir = "{tmp_path / "data"}"']
    if redis_url:
        lines += ["[redis]", f'url = "{redis_url}"']
    lines += [
        "[log]", f'dir = "{tmp_path / "log"}"', 'level = "warning"',
        "[push]", f"port = {port}",
        "[pop]", "heartbeat_interval = 0.2", "heartbeat_ttl = 2.0", "sweep_interval = 0.2", "grace_period = 2.0",
        "shutdown_redis_wait = 2.0",
        "[metrics]", "push_port = 0", "pop_port = 0", "[web]", "port = 0",
        "[queues.transfer]", 'actions = ["echo"]',
    ]
    path = tmp_path / "dataq.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


async def summary_when(store: QueueStore, done: int) -> None:
    async def drained() -> bool:
        counters = await store.counters()
        return counters.get("done", 0) >= done

    await eventually(drained, timeout=30, what=f"{done} records done")


def stop_suite(suite: subprocess.Popen[bytes], signum: int, data_dir: Path) -> bytes:
    """Stop ``dataq run`` as an operator would; it must exit 0 and take its redis-server down with it."""
    suite.send_signal(signum)
    _, stderr = suite.communicate(timeout=60)
    assert suite.returncode == 0, stderr.decode()[-2000:]
    assert find_running(data_dir) is None
    return stderr


@pytest.mark.timeout(90)
async def test_dataq_run_owns_redis_runs_the_daemons_restarts_a_dead_one_and_stops_cleanly(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    config = suite_config(tmp_path, port)
    env = {**daemon_env(), "HOME": str(tmp_path)}
    suite = subprocess.Popen([*DATAQ, "run", "--config", str(config)], env=env, stderr=subprocess.PIPE)
    children.append(suite)

    url_box: list[str] = []

    async def redis_up() -> bool:
        url = find_running(tmp_path / "data")
        url_box[:] = [url] if url else []
        return url is not None

    await eventually(redis_up, timeout=30, what="the embedded redis-server")
    store = QueueStore.from_url(url_box[0], "transfer")
    try:
        result = await Feeder("127.0.0.1", port, window=50, retry_for=30).feed(make_records(200))
        assert (result.pushed, result.errors) == (200, 0)
        await summary_when(store, 200)

        (pop,) = [w for w in await store.workers() if w.info["role"] == "pop"]
        os.kill(int(pop.info["pid"]), signal.SIGKILL)  # type: ignore[call-overload]

        async def replaced() -> bool:
            pops = [w for w in await store.workers() if w.info["role"] == "pop" and w.heartbeat is not None]
            return any(w.worker_id != pop.worker_id for w in pops)

        await eventually(replaced, timeout=30, what="the runner to restart the killed pop daemon")
        result = await Feeder("127.0.0.1", port, window=50).feed(make_records(50, start=1000))
        assert result.pushed == 50
        await summary_when(store, 250)
    finally:
        await store.close()
    stderr = stop_suite(suite, signal.SIGINT, tmp_path / "data")
    assert b"dataq running" in stderr and b"feed 127.0.0.1:" in stderr


@pytest.mark.timeout(90)
async def test_daemons_tell_the_service_manager_they_are_ready_and_count_their_work_in_metrics(
    tmp_path: Path, redis_url: str, children: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    config = suite_config(tmp_path, port, redis_url)
    notify_path = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    listener.setblocking(False)
    env = {**daemon_env(), "HOME": str(tmp_path), "NOTIFY_SOCKET": str(notify_path)}
    for command in ("push", "pop"):
        children.append(subprocess.Popen([*DATAQ, command, "--config", str(config)], env=env))
    ready: list[str] = []
    deadline = time.monotonic() + 30
    while sum("READY=1" in m for m in ready) < 2 and time.monotonic() < deadline:
        try:
            ready.append(listener.recv(4096).decode())
        except BlockingIOError:
            await asyncio.sleep(0.05)
    listener.close()
    assert sum("READY=1" in m for m in ready) == 2

    records = make_records(120)
    store = QueueStore.from_url(redis_url, "transfer")
    try:
        # Held back until all is fed, so the repeated ids are still queued (a done record may be pushed anew).
        await store.set_flag(Flag.ACTION, False)
        result = await Feeder("127.0.0.1", port, window=20).feed([*records, *records[:30], "relative/path x 1"])
        assert (result.pushed, result.ignored, result.errors) == (120, 30, 1)
        await store.set_flag(Flag.ACTION, True)
        await summary_when(store, 120)
        all_done = time.monotonic()
        urls = {w.info["role"]: str(w.info["metrics"]) for w in await store.workers()}
    finally:
        await store.close()
    push = scrape(urls["push"])
    assert push['dataq_records_pushed_total{queue="transfer"}'] == 120
    assert push['dataq_duplicates_total{queue="transfer"}'] == 30
    assert push['dataq_input_errors_total{queue="transfer"}'] == 1

    async def pop_metrics_caught_up() -> bool:
        # The queue's gauges come from a cache the daemon refreshes every second, not from the scrape, and one
        # refresh reads the lengths and the oldest records in two goes: one that read the lengths before the feed
        # and the oldest after it said "tracked 0" beside the age of a held-back record (a CI run failed so). A
        # refresh begun after everything was done reads both after it.
        return time.monotonic() > all_done + 2 * REDIS_PROBE_INTERVAL and \
            scrape(urls["pop"])['dataq_queue_length{list="tracked",queue="transfer"}'] == 0

    await eventually(pop_metrics_caught_up, timeout=10, what="the pop daemon's gauges to show an empty queue")
    pop = scrape(urls["pop"])
    assert pop['dataq_records_done_total{queue="transfer"}'] == 120
    assert pop['dataq_action_duration_seconds_count{action="echo",queue="transfer"}'] == 120
    # echo names no destination of its own: its bytes are counted under its name.
    assert pop['dataq_action_bytes_total{action="echo",destination="echo",queue="transfer"}'] == sum(
        record.size for record in records)
    assert pop['dataq_flag{flag="action",queue="transfer"}'] == 1
    assert pop['dataq_queue_oldest_age_seconds{list="active",queue="transfer"}'] == 0
    for daemon in (push, pop):
        assert daemon["process_resident_memory_bytes{}"] > 0
        assert {family(name) for name in daemon} <= EXPORTED_METRICS


def family(sample: str) -> str:
    """The family a sample of :func:`scrape` belongs to, as :data:`EXPORTED_METRICS` names it."""
    name = sample.partition("{")[0]
    for suffix in ("_bucket", "_sum", "_count", "_created"):
        if name.endswith(suffix) and name.removesuffix(suffix) in EXPORTED_METRICS:
            return name.removesuffix(suffix)
    return name


@pytest.mark.timeout(60)
async def test_dataq_run_with_no_settings_file_serves_the_default_transfer_queue(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    # No settings file at all: only where to keep data (not this user's home) and a free port instead of 9988.
    env = {**daemon_env(), "HOME": str(tmp_path), "DATAQ_DATA_DIR": str(tmp_path / "state"),
           "DATAQ_PUSH_PORT": str(port), "DATAQ_LOG_DIR": str(tmp_path / "log")}
    suite = subprocess.Popen([*DATAQ, "run"], env=env, stderr=subprocess.PIPE, cwd=tmp_path)
    children.append(suite)
    result = await Feeder("127.0.0.1", port, window=10, retry_for=30).feed(make_records(20))
    assert result.pushed == 20
    url = find_running(tmp_path / "state")
    assert url is not None
    store = QueueStore.from_url(url, "transfer")
    try:
        await summary_when(store, 20)
    finally:
        await store.close()
    stop_suite(suite, signal.SIGTERM, tmp_path / "state")


@pytest.mark.timeout(90)
async def test_dataq_run_feeds_the_files_of_each_watched_directory(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    config = suite_config(tmp_path, port)
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    config.write_text(config.read_text() + f'[feed]\ndirectories = ["{incoming}"]\nsettle = 0.2\n')
    (incoming / "before.fits").write_bytes(b"written before the suite started")
    suite = subprocess.Popen([*DATAQ, "run", "--config", str(config)], env={**daemon_env(), "HOME": str(tmp_path)},
                             stderr=subprocess.PIPE, cwd=tmp_path)
    children.append(suite)
    url = None

    async def redis_up() -> bool:
        nonlocal url
        url = find_running(tmp_path / "data")
        return url is not None

    await eventually(redis_up, timeout=30, what="the embedded redis-server")
    assert url is not None
    store = QueueStore.from_url(url, "transfer")
    try:
        await summary_when(store, 1)
        (incoming / "after.fits").write_bytes(b"written while it runs")
        await summary_when(store, 2)
    finally:
        await store.close()
    stop_suite(suite, signal.SIGTERM, tmp_path / "data")
    assert (tmp_path / "data" / "feed" / path_instance(str(incoming)) / "spool.sqlite").is_file()
