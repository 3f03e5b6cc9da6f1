"""The installed ``dataq-cli`` as an operator (or systemd, or a monitoring probe) runs it: a separate process."""

from __future__ import annotations

import json
import os
import pty
import queue
import signal
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import IO

from dataq.cli.options import EXIT_FAILURE, EXIT_OK, EXIT_UNAVAILABLE
from dataq.embedded.redis_server import free_port
from dataq.record import format_line
from dataq.store import QueueStore
from tests.cli_support import QUEUE, on_store, seed, write_config
from tests.conftest import skip_on_other_os
from tests.helpers import make_records

PROCESS_TIMEOUT = 30.0
LINE_TIMEOUT = 10.0
STREAMED = 100_000
"""Records of the streaming test: enough that holding them all would dwarf what streaming holds."""
PEAK_PREFIX = "PEAK_KB "
# Runs dataq-cli and reports the process's peak resident memory (VmHWM, which exec resets, unlike ru_maxrss).
PEAK_WRAPPER = r"""
import re, sys
from dataq.cli.console import main
try:
    main()
finally:
    status = open("/proc/self/status").read()
    sys.stderr.write("PEAK_KB " + re.search(r"VmHWM:\s+(\d+)", status).group(1) + "\n")
"""


def dataq_cli() -> list[str]:
    """The console script installed beside this interpreter (what an operator's shell finds)."""
    script = Path(sys.executable).with_name("dataq-cli")
    assert script.exists(), f"dataq-cli is not installed beside {sys.executable}"
    return [str(script)]


def run(config_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*dataq_cli(), "--config", str(config_file), *args],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        check=False,
    )


class Lines:
    """The stdout lines of a running process, read by a thread so a test can wait for one with a timeout."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)

    def next(self) -> str:
        return self._lines.get(timeout=LINE_TIMEOUT)

    def join(self) -> None:
        self._thread.join(LINE_TIMEOUT)


def test_the_installed_entry_point_runs_switches_and_prints_json(config: Path, redis_url: str) -> None:
    records = seed(redis_url, 3)
    first, last = records[2].checksum, records[1].checksum
    result = run(config, "--json", "--summary", "--list", "active", "--advance", first, last)
    assert result.returncode == EXIT_OK, result.stderr
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["switch"] for d in docs] == ["advance", "list", "summary"]
    assert docs[0]["moved"] == 2 and docs[2]["active"] == 3
    assert [r["checksum"] for r in docs[1]["records"]] == [records[0].checksum, records[2].checksum,
                                                           records[1].checksum]


def test_follow_tails_new_events_until_ctrl_c_and_exits_0(config: Path, redis_url: str) -> None:
    seed(redis_url, 2)
    process = subprocess.Popen(
        [*dataq_cli(), "--config", str(config), "--json", "--events", "1", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = Lines(process.stdout)
        shown = json.loads(lines.next())
        assert shown["switch"] == "events" and len(shown["events"]) == 1
        pushed = make_records(3, start=10)

        async def push(store: QueueStore) -> None:
            await store.push_batch(pushed, source="test")

        on_store(redis_url, push)
        followed = [json.loads(lines.next()) for _ in pushed]
        assert [d["switch"] for d in followed] == ["follow"] * 3
        assert [d["event"]["record"] for d in followed] == [r.checksum for r in pushed]
        process.send_signal(signal.SIGINT)
        assert process.wait(PROCESS_TIMEOUT) == EXIT_OK
        lines.join()
    finally:
        process.kill()
        process.communicate()


def test_a_reader_that_stops_early_ends_the_listing_quietly(config: Path, redis_url: str) -> None:
    seed(redis_url, 5000)  # far more output than a pipe buffers
    process = subprocess.Popen(
        [*dataq_cli(), "--config", str(config), "--list", "active"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().endswith(", size=14921\n")
    process.stdout.close()  # as `| head -1` does
    assert process.wait(PROCESS_TIMEOUT) == EXIT_OK
    assert process.stderr.read() == ""
    process.stderr.close()


def test_an_unreachable_redis_exits_4_with_one_line_on_stderr(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    result = run(write_config(tmp_path, url), "--summary")
    assert result.returncode == EXIT_UNAVAILABLE
    assert result.stdout == ""
    assert result.stderr.startswith(f"Error: Redis is unavailable at {url} (from the settings file {tmp_path}/")
    assert result.stderr.count("\n") == 1


def test_health_exit_status_tells_a_monitor_whether_the_daemons_are_alive(config: Path, redis_url: str) -> None:
    unhealthy = run(config, "--health")
    assert unhealthy.returncode == EXIT_FAILURE
    assert unhealthy.stdout == f"UNHEALTHY: no daemon is running for queue {QUEUE}\n"

    async def beat(store: QueueStore) -> None:
        await store.heartbeat("host-1:1:pop:aaaaaa", {"role": "pop"}, {"running": 0}, 30.0)

    on_store(redis_url, beat)
    assert run(config, "--health").returncode == EXIT_OK


@skip_on_other_os("needs a Linux pseudo-terminal")
def test_load_shows_a_progress_bar_on_a_terminal_only(config: Path, redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "records.txt"
    path.write_text("".join(format_line(r) + "\n" for r in make_records(3000)))
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [*dataq_cli(), "--config", str(config), "--load", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=terminal,
        )
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the process has exited and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(PROCESS_TIMEOUT) == EXIT_OK
    finally:
        os.close(controller)
    text = seen.decode()
    assert "Loading" in text and "100%" in text
    assert "Loaded 3000 records (0 duplicates ignored)" in text
    piped = run(config, "--load", str(path))
    assert "Loading" not in piped.stdout + piped.stderr


def peak_kb(config_file: Path, *args: str) -> int:
    """Run dataq-cli with ``args`` (which must succeed) and return its peak resident memory in KiB."""
    result = subprocess.run(
        [sys.executable, "-c", PEAK_WRAPPER, "--config", str(config_file), *args],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        check=False,
    )
    assert result.returncode == EXIT_OK, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith(PEAK_PREFIX)]
    return int(line.removeprefix(PEAK_PREFIX))


@skip_on_other_os("needs Linux /proc")
def test_dump_and_load_of_a_large_queue_stream_in_bounded_memory(
    config: Path, redis_url: str, tmp_path: Path
) -> None:
    # What holding every record at once costs, measured here: the bound below must stay far under it.
    tracemalloc.start()
    try:
        make_records(STREAMED)
        holding_all_kb = tracemalloc.get_traced_memory()[1] // 1024
    finally:
        tracemalloc.stop()
    seed(redis_url, STREAMED)
    baseline = peak_kb(config, "--info")  # the interpreter, dataq and one Redis connection

    target = tmp_path / "big.txt"
    dump_peak = peak_kb(config, "--dump", str(target))
    with target.open() as dumped:
        assert sum(1 for _ in dumped) == STREAMED
    on_store(redis_url, lambda s: s.clear())
    load_peak = peak_kb(config, "--load", str(target))
    assert on_store(redis_url, lambda s: s.summary()).active == STREAMED

    bound = holding_all_kb // 5
    assert dump_peak - baseline < bound, (baseline, dump_peak, holding_all_kb)
    assert load_peak - baseline < bound, (baseline, load_peak, holding_all_kb)
