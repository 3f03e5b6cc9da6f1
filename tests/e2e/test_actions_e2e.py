"""The mountain-to-valley chain end to end, every part a real process on loopback: 1,000 real files fed to
``dataq push``, run by ``dataq pop`` through ``disk_store`` then ``network_move`` to an ``rsync --daemon``, and
handed on to the valley's ``dataq push``. Every file must arrive exactly once, verified, and the mountain's
queue must end empty."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from pathlib import Path

from dataq.embedded.redis_server import free_port
from dataq.feed.client import Feeder
from dataq.record import Record
from dataq.store import QueueList, QueueStore
from testbed.rsync import RsyncDaemon, rsync_daemon
from testbed.waits import eventually_equal
from tests.actions_support import LOOPBACK, hidden_leftovers, make_file, md5, stored_copies
from tests.pop_support import PopProcess, counter, processes, write_tables
from tests.push_support import push_process

FILES = 1000
CONCURRENCY = 32
DONE_TIMEOUT = 60.0
MOUNTAIN, VALLEY = "transfer", "submit"
VALLEY_ROOT = "/valley/incoming"
"""Where the valley's files are, as the valley sees them (the rsync module's directory)."""


def write_config(tmp_path: Path, redis_url: str, daemon: RsyncDaemon, ports: dict[str, int]) -> Path:
    tables: dict[str, dict[str, object]] = {
        "redis": {"url": redis_url, "socket_timeout": 2.0},
        "log": {"dir": str(tmp_path / "log"), "format": "json"},
        "push": {"host": LOOPBACK},
        "pop": {"concurrency": CONCURRENCY, "heartbeat_interval": 0.2, "heartbeat_ttl": 2.0,
                "sweep_interval": 0.2, "grace_period": 5.0},
        f"queues.{MOUNTAIN}": {"push_port": ports[MOUNTAIN], "actions": ["disk_store", "network_move"]},
        f"queues.{MOUNTAIN}.disk_store": {"root": str(tmp_path / "store")},
        f"queues.{MOUNTAIN}.network_move": {
            "destination": daemon.url("valley", "incoming"), "layout": "{checksum2}/{name}",
            "next_sites": [f"{LOOPBACK}:{ports[VALLEY]}"], "next_path": f"{VALLEY_ROOT}/{{relpath}}",
            "remove_source": True,
        },
        f"queues.{VALLEY}": {"push_port": ports[VALLEY], "actions": ["echo"]},
    }
    return write_tables(tmp_path / "dataq.toml", tmp_path / "data", tables)


def make_files(directory: Path) -> list[Record]:
    rng = random.Random(20140708)
    return [make_file(directory, f"c15e_140708_{n:06d}_ori.fits",
                      f"{n}\n".encode() + rng.randbytes(rng.randint(0, 4096))) for n in range(FILES)]


def files_below(root: Path) -> dict[str, Path]:
    """md5 -> path of every file below ``root`` (asserting no two hold the same data)."""
    found: dict[str, Path] = {}
    for path in stored_copies(root):
        digest = md5(path.read_bytes())
        assert digest not in found, f"{path} and {found[digest]} hold the same data"
        found[digest] = path
    return found


async def test_a_thousand_files_are_stored_moved_and_handed_on_exactly_once(redis_url: str, tmp_path: Path) -> None:
    records = make_files(tmp_path / "mountain")
    (tmp_path / "store").mkdir()
    by_checksum = {record.checksum: record for record in records}
    valley = tmp_path / "valley"
    with rsync_daemon(tmp_path / "rsyncd", {"valley": valley}) as daemon:
        ports = {MOUNTAIN: free_port(), VALLEY: free_port()}
        config = write_config(tmp_path, redis_url, daemon, ports)
        mountain_queue = QueueStore.from_url(redis_url, MOUNTAIN)
        valley_queue = QueueStore.from_url(redis_url, VALLEY)
        try:
            with push_process(config, ports[VALLEY], "--queue", VALLEY) as valley_push, \
                    push_process(config, ports[MOUNTAIN], "--queue", MOUNTAIN) as mountain_push, \
                    processes() as started:
                pop = PopProcess(config, "--queue", MOUNTAIN)
                started.append(pop)
                await pop.registered(mountain_queue)

                # A window larger than the feed: the feeder then sees the end of its input before any reply
                # (with a last window filled exactly, it may wait for the daemon to close the connection).
                fed = await Feeder(LOOPBACK, ports[MOUNTAIN], window=FILES + 1).feed(records)
                assert (fed.pushed, fed.errors) == (FILES, 0)
                await eventually_equal(lambda: counter(mountain_queue, "done"), FILES, timeout=DONE_TIMEOUT,
                                     what="every record done")

                pop.signal(signal.SIGTERM)
                assert await pop.wait() == 0, pop.stderr()
                for push in (mountain_push, valley_push):
                    push.signal(signal.SIGTERM)
                    assert await asyncio.to_thread(push.wait) == 0

            summary = await mountain_queue.summary()
            assert (summary.tracked, summary.active, summary.inactive, summary.in_flight) == (0, 0, 0, 0)
            assert summary.counters.get("failed", 0) == 0, "no record needed a second try"

            stored = files_below(tmp_path / "store")
            assert set(stored) == set(by_checksum), "disk_store: every file stored once, with its checksum"
            assert all(path.name == checksum for checksum, path in stored.items())

            arrived = files_below(valley)
            assert set(arrived) == set(by_checksum), "network_move: every file at the valley, verified"
            assert all(path.name == os.path.basename(by_checksum[checksum].path)
                       for checksum, path in arrived.items())
            received = daemon.received()
            assert len(received) == FILES == len(set(received)), "each file was sent exactly once"
            assert hidden_leftovers(tmp_path / "store") == [] and hidden_leftovers(valley) == []
            assert list((tmp_path / "mountain").iterdir()) == [], "moved: the sources are gone"

            handed = await valley_queue.list_records(QueueList.ACTIVE)
            assert len(handed) == FILES
            assert {record.checksum: record.path for record in handed} == {
                checksum: f"{VALLEY_ROOT}/{checksum[:2]}/{os.path.basename(record.path)}"
                for checksum, record in by_checksum.items()
            }
        finally:
            await mountain_queue.close()
            await valley_queue.close()
