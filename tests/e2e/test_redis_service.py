"""``dataq redis``: the embedded redis-server as its own service, as dataq-redis.service runs it."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import redis

from dataq.embedded.redis_server import find_running

DATAQ = [sys.executable, "-c", "from dataq.cli.main import main; main()"]


def test_dataq_redis_serves_the_data_directory_tells_systemd_and_stops_cleanly(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = tmp_path / "dataq.toml"
    config.write_text(f'data_dir = "{data_dir}"\n[log]\ndir = "{tmp_path / "log"}"\n')
    notify_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(notify_path))
        notify.settimeout(30)
        env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "NOTIFY_SOCKET": str(notify_path), "HOME": str(tmp_path)}
        process = subprocess.Popen([*DATAQ, "redis", "--config", str(config)], env=env)
        try:
            message = notify.recv(4096).decode()
            assert "READY=1" in message
            url = find_running(data_dir)
            assert url is not None and url.startswith("unix://")
            client = redis.Redis.from_url(url)
            client.set("k", "v")
            client.close()
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0
            assert find_running(data_dir) is None
            notify.settimeout(1)
            later = []
            while True:
                try:
                    later.append(notify.recv(4096).decode())
                except TimeoutError:
                    break
            assert any("STOPPING=1" in m for m in later)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
