"""A one-shot ``dataq feed`` (a record file or ``--scan``, no spool) starts as a short command should: it loads
neither the spool's, the watcher's and the metrics' modules nor a Redis client, which it does not use (their
imports cost each start some 20-30 ms on a 2-vCPU VM, a tenth of a whole feed of ten large files)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

UNUSED_BY_A_ONE_SHOT_FEED = ("sqlite3", "asyncinotify", "prometheus_client", "redis", "dataq.feed.spool",
                             "dataq.feed.spooled", "dataq.feed.watch")
PROBE = """
import sys
from dataq.cli.main import main
sys.argv = ["dataq", "feed", "--config", sys.argv[1], "--port", "1", "--retry-for", "0.01", *sys.argv[2:]]
try:
    main()
except SystemExit:
    pass
print("fed:", "dataq.feed.command" in sys.modules, "loaded:", *(name for name in {unused!r} if name in sys.modules))
"""


@pytest.mark.parametrize("source", ["a record file", "a scan"])
def test_a_one_shot_feed_loads_none_of_the_spool_watch_metrics_or_redis_modules(source: str, tmp_path: Path) -> None:
    config = tmp_path / "dataq.toml"
    config.write_text(f'data_dir = "{tmp_path}"\n[queues.q]\n')
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.fits").write_bytes(b"a file to scan")
    given = ["-"] if source == "a record file" else ["--scan", str(tmp_path / "files")]
    ran = subprocess.run([sys.executable, "-c", PROBE.format(unused=UNUSED_BY_A_ONE_SHOT_FEED), str(config), *given],
                         input="/no/such 0123456789abcdef0123456789abcdef 1\n", capture_output=True, text=True,
                         timeout=60, check=True)
    assert ran.stdout.splitlines()[-1] == "fed: True loaded:", f"{ran.stdout}{ran.stderr}"
