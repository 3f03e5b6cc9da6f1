"""Where ``network_move``'s time goes on large files: a timeline of one run, and its rsync call against plain ones.

``timeline``: ``--count`` files of ``--size`` bytes moved by :class:`NetworkMoveAction` in this process (no
queue), to an ``rsync --daemon`` on loopback: when each source read ran, when each batch's rsync ran, the wall
time, and the CPU seconds of this process (the md5 of the sources, in threads) and of its rsync children
(the daemon's side is not counted). ``md5sum`` and a plain ``rsync -a --checksum`` of the same files are timed
first for scale.

``calls``: the rsync command line a batch runs (``--files-from`` over a tree of symlinks, ``--copy-links``,
itemized output, ``TCP_NODELAY``) against plain ``rsync -a`` and ``rsync -a --checksum`` of the same directory,
each to a fresh destination, rounds interleaved: whether the way dataq calls rsync costs anything by itself.

Run it: ``.venv/bin/python bench/move_profile.py timeline|calls [--count N] [--size BYTES] [--rounds N]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.move import LARGE_BYTES, make_files, timed
from dataq.actions import network_move
from dataq.actions.network_move import NetworkMoveAction, NetworkMoveOptions
from dataq.record import Record
from testbed.actions import action_context
from testbed.rsync import RsyncDaemon


def cpu_seconds() -> tuple[float, float]:
    """(this process, its waited-for children) user + system CPU seconds."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


async def timeline(work: Path, count: int, size: int) -> None:
    daemon = RsyncDaemon(work / "rsyncd", {"m": work / "module"})
    daemon.start()
    try:
        records = make_files(work / "src", count, size)
        timed(["sync"])
        md5sum = timed(["md5sum", *(record.path for record in records)])
        plain = timed(["rsync", "-a", "--checksum", f"{work / 'src'}/", daemon.url("m", "plain")])
        timed(["sync"])  # the plain run's dirty pages would throttle the writes of the one timed next
        print(f"{count} files of {size:,} bytes; md5sum {md5sum:.2f} s, rsync -a --checksum {plain:.2f} s")
        action = NetworkMoveAction(NetworkMoveOptions(destination=daemon.url("m", "dq")),
                                   action_context(concurrency=count))
        await action.start()
        started = time.perf_counter()
        events: list[tuple[float, float, str]] = []
        read_source = network_move.read_source_sync

        def traced_read(record: Record, *args: Any, **kwargs: Any) -> Any:
            begin = time.perf_counter() - started
            result = read_source(record, *args, **kwargs)
            events.append((begin, time.perf_counter() - started, f"read {Path(record.path).name}"))
            return result

        move_batch = action._move_batch

        async def traced_batch(moves: list[Any]) -> Any:
            begin = time.perf_counter() - started
            result = await move_batch(moves)
            events.append((begin, time.perf_counter() - started, f"rsync batch of {len(moves)}"))
            return result

        network_move.read_source_sync = traced_read  # type: ignore[assignment]
        action._batcher._handle = traced_batch  # type: ignore[assignment]
        before = cpu_seconds()
        await asyncio.gather(*(action.run(record) for record in records))
        wall = time.perf_counter() - started
        after = cpu_seconds()
        await action.close()
        for begin, end, what in sorted(events):
            print(f"  {begin:5.2f} - {end:5.2f} s  {what}")
        print(f"network_move {wall:.2f} s (ratio {plain / wall:.2f}); CPU: this process {after[0] - before[0]:.2f} s, "
              f"rsync clients {after[1] - before[1]:.2f} s")
    finally:
        daemon.stop()


def calls(work: Path, count: int, size: int, rounds: int) -> None:
    daemon = RsyncDaemon(work / "rsyncd", {"m": work / "module"})
    daemon.start()
    try:
        records = make_files(work / "src", count, size)
        tree, listing = work / "tree", work / "list"
        tree.mkdir()
        for record in records:
            os.symlink(record.path, tree / Path(record.path).name)
        listing.write_bytes(b"".join(os.fsencode(Path(record.path).name) + b"\0" for record in records))
        timed(["sync"])
        variants = {
            "rsync -a --checksum": ["rsync", "-a", "--checksum", f"{work / 'src'}/"],
            "rsync -a": ["rsync", "-a", f"{work / 'src'}/"],
            "dataq's batch call": ["rsync", "--copy-links", "--times", f"--files-from={listing}", "--from0",
                                   "--out-format=dataq-sent %i %n", "--timeout=60", "--contimeout=60",
                                   "--sockopts=TCP_NODELAY", "--", f"{tree}/"],
        }
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        for round_no in range(rounds):
            for number, (name, argv) in enumerate(variants.items()):
                timed(["sync"])
                seconds[name].append(timed([*argv, daemon.url("m", f"{number}-{round_no}")]))
        print(f"{count} files of {size:,} bytes, {rounds} rounds, median s: " +
              ", ".join(f"{name} {statistics.median(values):.2f}" for name, values in seconds.items()))
    finally:
        daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("timeline", "calls"))
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--size", type=int, default=LARGE_BYTES)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dataq-bench-move-profile-", dir=os.environ.get("BENCH_DIR")) as temp:
        if args.what == "timeline":
            asyncio.run(timeline(Path(temp), args.count, args.size))
        else:
            calls(Path(temp), args.count, args.size, args.rounds)


if __name__ == "__main__":
    main()
