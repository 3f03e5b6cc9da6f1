"""Batches fill with the default ``[pop] concurrency``, and a ``dataq pop`` killed (SIGKILL) in the middle of a batch
transfer, holding a full claim, loses nothing: its rsync dies with it, its records are taken back from the dead
worker, and only the batches it was sending are sent again."""

from __future__ import annotations

import asyncio
import glob
import os
import signal
from collections import Counter
from pathlib import Path

from dataq.actions.rsync import WORK_PREFIX
from dataq.config import PopSettings
from dataq.store import QueueStore
from testbed.rsync import RsyncDaemon, rsync_daemon
from testbed.waits import eventually, eventually_equal
from tests.actions_support import make_file, md5, recording_rsync
from tests.pop_support import PopProcess, counter, processes, write_tables

FILES = 48
FILE_BYTES = 128 * 1024
BATCH = 8
BANDWIDTH_KB = 1024
"""rsync's --bwlimit (KB/s): a batch of 1 MB takes about a second, long enough to be killed in its middle."""
QUEUE = "transfer"
DONE_TIMEOUT = 90.0


def write_config(tmp_path: Path, redis_url: str, daemon: RsyncDaemon, rsync: Path, *,
                 move: dict[str, object] | None = None) -> Path:
    # [pop] concurrency is left at its default (4): the batches must fill without it.
    tables: dict[str, dict[str, object]] = {
        "redis": {"url": redis_url, "socket_timeout": 2.0},
        "log": {"dir": str(tmp_path / "log"), "format": "json"},
        "pop": {"heartbeat_interval": 0.2, "heartbeat_ttl": 1.5, "sweep_interval": 0.2, "grace_period": 5.0},
        f"queues.{QUEUE}": {"actions": ["network_move"]},
        f"queues.{QUEUE}.network_move": {"destination": daemon.url("valley"), "rsync": str(rsync),
                                         **(move if move is not None else
                                            {"extra_args": [f"--bwlimit={BANDWIDTH_KB}"], "batch_size": BATCH})},
    }
    return write_tables(tmp_path / "dataq.toml", tmp_path / "data", tables)


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_pop_daemon_killed_mid_batch_loses_nothing_and_resends_at_most_its_batches(
        redis_url: str, tmp_path: Path) -> None:
    records = [make_file(tmp_path / "mountain", f"f{n:03}.fits", os.urandom(FILE_BYTES)) for n in range(FILES)]
    valley = tmp_path / "valley"
    program, calls = recording_rsync(tmp_path)
    store = QueueStore.from_url(redis_url, QUEUE)
    try:
        with rsync_daemon(tmp_path / "rsyncd", {"valley": valley}) as daemon, processes() as started:
            config = write_config(tmp_path, redis_url, daemon, program)
            await store.push_batch(records, source="test")
            # Their own temporary directory: any network_move that starts removes the work directories of dead
            # daemons, and another test's, starting between the kill and the look below, would remove this one's.
            tmp = tmp_path / "tmp"
            tmp.mkdir()
            first = PopProcess(config, tmp=tmp)
            started.append(first)
            work_dirs = os.path.join(tmp, f"{WORK_PREFIX}{first.pid}-*")
            worker = await first.registered(store)

            def mid_batch() -> bool:
                # Past the first batches, which are cut small (batch_age = 0): a full one takes a second to send.
                return len(daemon.received()) >= 3 and bool(glob.glob(work_dirs))

            while True:
                await eventually(lambda: asyncio.sleep(0, result=mid_batch()), timeout=30.0,
                                 what="files to arrive while a batch is being sent")
                # Stopped, then looked at again: a batch that ended between the look and the kill would leave
                # nothing to clean up.
                first.signal(signal.SIGSTOP)
                if mid_batch():
                    break
                first.signal(signal.SIGCONT)
            first.kill()
            held = await store.processing(worker)  # nobody sweeps the dead worker's records before the next starts
            # Held: running, or done and waiting to be settled; at most twice what runs at once.
            assert len(held) > 2 * PopSettings().concurrency, "the claim fills batches, not [pop] concurrency"
            before = set(daemon.received())
            assert len(before) < FILES, "killed in the middle, not at the end"

            started_rsyncs = [int(line.split()[0]) for line in calls.read_text().splitlines()]
            await eventually(lambda: asyncio.sleep(0, result=not any(map(running, started_rsyncs))),
                             timeout=10.0, what="the killed daemon's rsync processes to die with it")

            left = glob.glob(work_dirs)
            assert left, "the killed daemon left the work directory of its batch"
            second = PopProcess(config, tmp=tmp)
            started.append(second)
            await eventually_equal(lambda: counter(store, "done"), FILES, timeout=DONE_TIMEOUT,
                                 what="every record done")
            assert not any(map(os.path.exists, left)), "the next daemon removes what the killed one left"
            summary = await store.summary()
            assert (summary.active, summary.inactive, summary.in_flight) == (0, 0, 0)
            received = Counter(daemon.received())
        for record in records:
            assert md5((valley / Path(record.path).name).read_bytes()) == record.checksum
        again = [name for name, times in received.items() if times > 1]
        assert max(received.values()) <= 2
        assert len(again) <= 2 * BATCH, "at most the batches in flight at the kill are sent again"
    finally:
        await store.close()


async def test_batches_fill_with_the_default_settings(redis_url: str, tmp_path: Path) -> None:
    count, batch = 600, 100  # network_move's default batch_size
    records = [make_file(tmp_path / "mountain", f"f{n:03}.fits", os.urandom(4096)) for n in range(count)]
    valley = tmp_path / "valley"
    program, calls = recording_rsync(tmp_path)
    store = QueueStore.from_url(redis_url, QUEUE)
    try:
        with rsync_daemon(tmp_path / "rsyncd", {"valley": valley}) as daemon, processes() as started:
            config = write_config(tmp_path, redis_url, daemon, program, move={})
            await store.push_batch(records, source="test")
            started.append(PopProcess(config))
            await eventually_equal(lambda: counter(store, "done"), count, timeout=DONE_TIMEOUT,
                                   what="every record done")
        sends = [line for line in calls.read_text().splitlines() if "--dry-run" not in line]
        # With batches of at most [pop] concurrency (4), this took 150 rsync processes. A batch is cut as soon as
        # a slot is free (batch_age = 0), so some are small, but most fill while the previous ones are sent.
        assert len(sends) <= 3 * count // batch, f"{len(sends)} rsync processes sent {count} files"
        assert sorted(daemon.received()) == sorted(Path(record.path).name for record in records)
    finally:
        await store.close()
