"""A storing site's pop daemon killed (SIGKILL) again and again while it stores, each time at another point of its
batches (a copy published and not named yet among them): after the restarts, every file is stored once, named by
the manifest, and the copies audit finds nothing at all."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

from dataq.store import QueueStore
from testbed.waits import eventually_equal
from tests.actions_support import make_file, stored_copies
from tests.pop_support import PopProcess, counter, processes, write_tables

FILES = 2000
KILLS = 6
QUEUE = "archive"
DONE_TIMEOUT = 120.0


def write_config(tmp_path: Path, redis_url: str) -> Path:
    return write_tables(tmp_path / "dataq.toml", tmp_path / "data", {
        "redis": {"url": redis_url, "socket_timeout": 2.0},
        "log": {"dir": str(tmp_path / "log"), "format": "json"},
        # No metrics endpoint: seven daemons would each take an ephemeral port another test may have chosen.
        "metrics": {"enabled": False},
        # max_crashes above the kills: on a loaded host a life can end before it stores anything, and the same
        # records, held by every life, would go inactive (as they should) instead of being stored.
        "pop": {"concurrency": 64, "heartbeat_interval": 0.2, "heartbeat_ttl": 1.0, "sweep_interval": 0.2,
                "grace_period": 2.0, "max_crashes": KILLS + 1},
        f"queues.{QUEUE}": {"actions": ["disk_store"]},
        f"queues.{QUEUE}.disk_store": {"root": str(tmp_path / "archive"), "batch_size": 20}}, site="archive")


async def test_sigkills_while_storing_leave_every_copy_named_and_the_audit_clean(redis_url: str,
                                                                                  tmp_path: Path) -> None:
    records = [make_file(tmp_path / "valley", f"frame-{n:04d}.fits", b"frame %d " % n * 300) for n in range(FILES)]
    (tmp_path / "archive").mkdir()
    config = write_config(tmp_path, redis_url)
    store = QueueStore.from_url(redis_url, QUEUE)
    try:
        await store.push_batch(records, source="valley")
        with processes() as started:
            for kill in range(KILLS):
                pop = PopProcess(config)
                started.append(pop)
                await pop.registered(store)
                # Each life a little longer than the one before, so the kills land at other points of a batch.
                await asyncio.sleep(0.15 + 0.05 * kill)
                pop.process.send_signal(signal.SIGKILL)
                await asyncio.to_thread(pop.process.wait)
            last = PopProcess(config)
            started.append(last)
            await eventually_equal(lambda: counter(store, "done"), FILES, timeout=DONE_TIMEOUT,
                                   what="every record done after the kills")
        assert await counter(store, "reclaimed") > 0, "the kills struck while records were being stored"
        assert sorted(path.name for path in stored_copies(tmp_path / "archive")) == \
            sorted({record.checksum for record in records})
    finally:
        await store.close()
    audited = subprocess.run([sys.executable, "-c", "from dataq.cli.main import main; main()", "audit", "--config",
                              str(config), "--copies", "--deep", "--json"], capture_output=True, text=True,
                             timeout=120, check=False)
    assert audited.returncode == 0, audited.stdout[-2000:] + audited.stderr[-2000:]
    assert json.loads(audited.stdout.splitlines()[-1]) == {"summary": {"arrived": FILES}}
