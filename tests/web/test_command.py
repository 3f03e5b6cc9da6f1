"""``dataq web``: the console as its own process, on the settings' Redis, stopped by SIGTERM like every daemon."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from dataq.embedded.redis_server import free_port
from tests.pop_support import daemon_env

DATAQ = [sys.executable, "-c", "from dataq.cli.main import main; main()"]


def config(tmp_path: Path, redis_url: str) -> Path:
    path = tmp_path / "dataq.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n[redis]\nurl = "{redis_url}"\n[log]\ndir = "{tmp_path}"\n'
                    '[web]\nport = 1\n[queues.transfer]\n[queues.ingest]\npush_port = 9989\n')
    return path


async def test_dataq_web_serves_every_queue_on_the_port_given_and_stops_on_sigterm(
        tmp_path: Path, redis_url: str) -> None:
    port = free_port()  # the settings say port 1: --port wins
    log = tmp_path / "web.stderr"
    with log.open("wb") as stderr:
        process = subprocess.Popen([*DATAQ, "web", "--config", str(config(tmp_path, redis_url)), "--port", str(port)],
                                   env=daemon_env(), stderr=stderr)
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(300):  # 30 s: on a loaded two-core machine the daemon's start-up alone took over 10
                try:
                    async with session.get(f"http://127.0.0.1:{port}/api/queues") as response:
                        queues = await response.json()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"dataq web did not serve: {log.read_text()}")
        assert [queue["name"] for queue in queues] == ["transfer", "ingest"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_bad_port_is_a_usage_error(tmp_path: Path, redis_url: str) -> None:
    result = subprocess.run([*DATAQ, "web", "--config", str(config(tmp_path, redis_url)), "--port", "70000"],
                            check=False, env=daemon_env(), capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "70000 is not in the range 0<=x<=65535" in result.stderr
