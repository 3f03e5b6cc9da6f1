"""File moves through ``dataq pop`` against the plain tools on the same files, in one run, as ratios.

What is measured, per scenario and round: a fresh directory of files with random content (``--small`` files of
20 KB, ``--large`` files of 30 MB) and their md5 records; the plain tool on them, timed; then ``dataq pop`` (a
subprocess, ``--concurrency``, log level warning) on a queue pre-filled with those records, timed from the moment
its ``action`` flag goes on until the queue's ``done`` counter reaches the count. The ratio is tool time /
dataq time (1.0: as fast as the tool). Plain tools:

* ``network_move`` (verify on, layout ``{name}``) to an ``rsync --daemon`` on loopback: one
  ``rsync -a --checksum SRC/ rsync://.../module/plain/`` of the same directory;
* ``disk_store`` (verify on, default layout) into a directory of the same filesystem: the same job by hand
  (:func:`verified_copy`): ``cp -r SRC DEST``, ``sync``, the copies' cached pages dropped
  (``posix_fadvise(DONTNEED)``, each copy's own pages only), then ``md5sum -c`` of every copy against the
  records' checksums, split over every CPU. ``cp -r`` and ``sync`` alone check nothing (``--plain-copy`` times
  them alone, as the rows of before 2026-11-29 did).

Rounds alternate which goes first, each after a ``sync`` and after twice the bytes it will write were written to
a file and deleted (:func:`recycle_pages`: this VM's host backs guest memory on first touch, which made the
second run of a round write three times slower); the table gives medians. The rsync daemon runs without
``socket options`` (Debian's default), or with ``socket options = TCP_NODELAY`` (``--rsyncd-nodelay``, what
``docs/actions.md`` advises), its module with ``max connections = N`` with ``--rsyncd-max-connections N``;
both tools send to it. After each dataq run every
file is checked at its destination (md5) and no record may be inactive. The ``ceiling`` column is the ratio
dataq would reach if it did the plain tool's work plus the md5 it must compute and nothing else, spread over all
CPUs: tool / (tool + k * md5sum / CPUs), with ``md5sum`` of the same files timed in the same round and k the md5
passes a record needs (1: ``network_move``'s read of its source, ``disk_store``'s copy; the copy read back with
XXH3-128 is left out).

A private redis-server (``appendfsync always``) in a temporary directory holds the queue. Run it:
``.venv/bin/python bench/move.py [--quick] [--only network_move|disk_store] [--rounds N] [--concurrency N]``

``--whole``: the whole path as a user meets it (``bench/whole_path.py``), with dataq's DEFAULT settings (its
settings file names only the private Redis, the log, the push port and the action's destination): ``dataq push``
and ``dataq pop`` (subprocesses, log level warning) are started and up, then the clock runs from the start of
``dataq feed --config FILE --scan SRC`` (which hashes every file and pushes its record) until the queue's
``done`` counter reaches the file count; against the same plain tools, same rounds, checks and table, the
ceiling counting the feed's md5 pass too. ``--concurrency N`` adds a "tuned" column (``[pop] concurrency =
N``, run in turn with the others); ``--checksum ALGO`` writes ``checksum = "ALGO"`` into the queue's table
(md5, sha256, xxh128; a dataq without that key stops at its settings, as it should)::

    .venv/bin/python bench/move.py --whole [--rounds N] [--only network_move|disk_store]
    .venv/bin/python bench/move.py --whole --concurrency 256 [--checksum xxh128]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pop import RUN_TIMEOUT, STARTUP_TIMEOUT, wait_for
from bench.recently_deleted import journaled
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.record import Record
from dataq.store import Flag, QueueStore
from testbed.rsync import RsyncDaemon

SMALL_BYTES = 20_000
LARGE_BYTES = 30_000_000
PUSHED_AT = 1404777600.0
LOOPBACK = "127.0.0.1"
POP_CONCURRENCY = 256


S = TypeVar("S", bound="Scenario")
RSYNCD = {"nodelay": False, "max_connections": 0}
BASELINE = {"plain_copy": False}
"""``plain_copy``: ``disk_store``'s plain tool is ``cp -r`` and ``sync`` alone (:func:`verified_copy`)."""
"""How the benches' rsync daemon is configured (``--rsyncd-nodelay``, ``--rsyncd-max-connections``)."""


def rsync_daemon(work: Path) -> RsyncDaemon:
    """The destination of a round's ``network_move`` and of its plain ``rsync``."""
    return RsyncDaemon(work / "rsyncd", {"m": work / "module"}, nodelay=bool(RSYNCD["nodelay"]),
                       max_connections=int(RSYNCD["max_connections"]))


async def in_rounds(scenarios: list[S], rounds: int, prefix: str,
                    one: Callable[[S, Path, str, int], Awaitable[None]]) -> None:
    """Run ``one(scenario, work directory, Redis URL, round)`` for every scenario, round after round, each in a
    fresh directory, on one private redis-server (``appendfsync always``)."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=os.environ.get("BENCH_DIR")) as temp, \
            EmbeddedRedis(Path(temp) / "redis", port=0, appendfsync="always") as server:
        for round_no in range(rounds):
            for scenario in scenarios:
                work = Path(temp) / f"{scenario.action}-{scenario.size}-{round_no}"
                work.mkdir()
                await one(scenario, work, server.url, round_no)
                shutil.rmtree(work)


@dataclass
class Scenario:
    action: str
    label: str
    count: int
    size: int
    tool: list[float]
    dataq: list[float]
    md5sum: list[float]

    def passes(self) -> int:
        """md5 passes over the data a record needs: network_move's read of the source, disk_store's copy (its
        verify reads the copy back with XXH3-128, at some 40 times md5's speed: left out)."""
        return 1

    def ceiling(self, tool: float, md5sum: float) -> float:
        return tool / (tool + self.passes() * md5sum / (os.cpu_count() or 1))

    def row(self) -> str:
        tool, dataq, md5sum = (statistics.median(values) for values in (self.tool, self.dataq, self.md5sum))
        megabytes = self.count * self.size / 1e6
        return (f"| {self.action} | {self.label} | {self.count:,} | {megabytes:,.0f} | {tool:.2f} | {dataq:.2f} | "
                f"**{tool / dataq:.2f}** | {self.ceiling(tool, md5sum):.2f} | {self.count / dataq:,.0f} | "
                f"{megabytes / dataq:,.0f} |")


def make_files(directory: Path, count: int, size: int) -> list[Record]:
    directory.mkdir(parents=True)
    records = []
    for n in range(count):
        data = os.urandom(size)
        path = directory / f"f{n:06d}.fits"
        path.write_bytes(data)
        records.append(Record(path=str(path), checksum=hashlib.md5(data).hexdigest(), size=size, pushed_at=PUSHED_AT))
    return records


def verified_copy(source: Path, copy: Path, records: list[Record], *, check: bool = True) -> float:
    """Seconds of ``disk_store``'s job done by hand (see the module's docstring); ``check=False``: ``cp -r`` and
    ``sync`` alone. The ``md5sum -c`` lists are written before the clock runs (an operator has the checksums, as
    dataq has its records')."""
    cpus = os.cpu_count() or 1
    lists = [copy.parent / f".by-hand-{n}.md5" for n in range(cpus)]
    for n, listing in enumerate(lists):
        listing.write_text("".join(f"{record.checksum}  {copy / Path(record.path).name}\n"
                                   for record in records[n::cpus]))
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(source), str(copy)], check=True)
    subprocess.run(["sync"], check=True)
    if check:
        for record in records:
            descriptor = os.open(copy / Path(record.path).name, os.O_RDONLY)
            try:
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(descriptor)
        checks = [subprocess.Popen(["md5sum", "-c", "--quiet", str(listing)], stdout=subprocess.DEVNULL)
                  for listing in lists]
        if any(process.wait() != 0 for process in checks):
            raise SystemExit(f"md5sum -c found a copy under {copy} that is not its record's data")
    seconds = time.perf_counter() - started
    for listing in lists:
        listing.unlink()
    return seconds


def timed(*commands: list[str]) -> float:
    started = time.perf_counter()
    for command in commands:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def write_config(work: Path, url: str, queue: str, action: str, options: dict[str, str]) -> Path:
    table = "".join(f'{key} = "{value}"\n' for key, value in options.items())
    path = work / f"{queue}.toml"
    path.write_text(f'data_dir = "{work / "data"}"\n[redis]\nurl = "{url}"\n[log]\ndir = "{work / "log"}"\n'
                    f'level = "warning"\nformat = "json"\n[metrics]\nenabled = false\n'
                    f'[queues.{queue}]\nactions = ["{action}"]\n[queues.{queue}.{action}]\n{table}')
    return path


async def through_dataq(url: str, work: Path, queue: str, action: str, options: dict[str, str],
                        records: list[Record], concurrency: int) -> float:
    store = QueueStore.from_url(url, queue)
    try:
        await store.set_flag(Flag.ACTION, False)
        for start in range(0, len(records), 1000):
            await store.push_batch(records[start:start + 1000], source="bench")
        config = write_config(work, url, queue, action, options)
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from dataq.cli.main import main; main()", "pop", "--config", str(config),
            "--concurrency", str(concurrency), stdout=subprocess.DEVNULL)
        try:
            async def up() -> bool:
                if child.returncode is not None:
                    raise SystemExit(f"the pop daemon exited early with {child.returncode}")
                return len(await store.workers()) == 1

            await wait_for(up, STARTUP_TIMEOUT, "the pop daemon to start")
            started = time.perf_counter()
            await store.set_flag(Flag.ACTION, True)

            async def drained() -> bool:
                counters = await store.counters()
                if counters.get("inactive", 0) or (await store.summary()).inactive:
                    raise SystemExit(f"{action}: records failed: {await store.summary()}")
                return counters.get("done", 0) >= len(records)

            await wait_for(drained, RUN_TIMEOUT, f"{action} to finish")
            return time.perf_counter() - started
        finally:
            child.terminate()
            await asyncio.wait_for(child.wait(), 30)
    finally:
        await store.close()


def check_arrived(records: list[Record], where: Path, by_checksum: bool) -> None:
    found = {path.name: path for path in where.rglob("*") if path.is_file()}
    for record in records:
        path = found.get(record.checksum if by_checksum else os.path.basename(record.path))
        if path is None or hashlib.md5(path.read_bytes()).hexdigest() != record.checksum:
            raise SystemExit(f"{record.path} did not arrive intact under {where}")


async def one_round(scenario: Scenario, work: Path, url: str, concurrency: int, round_no: int) -> None:
    records = make_files(work / "src", scenario.count, scenario.size)
    scenario.md5sum.append(await asyncio.to_thread(timed, ["md5sum", *(record.path for record in records)]))
    queue = f"{scenario.action}{round_no}{scenario.size}"
    if scenario.action == "network_move":
        daemon = rsync_daemon(work)
        daemon.start()
        try:
            def tool() -> float:
                return timed(["rsync", "-a", "--checksum", f"{work / 'src'}/", daemon.url("m", "plain")])

            async def dataq() -> float:
                return await through_dataq(url, work, queue, "network_move", {"destination": daemon.url("m", "dq")},
                                           records, concurrency)

            await _both(scenario, tool, dataq, round_no, work)
        finally:
            daemon.stop()
        check_arrived(records, work / "module" / "dq", by_checksum=False)
    else:
        (work / "store").mkdir()

        def tool() -> float:
            return verified_copy(work / "src", work / "copy", records, check=not BASELINE["plain_copy"])

        async def dataq() -> float:
            return await through_dataq(url, work, queue, "disk_store", {"root": str(work / "store")}, records,
                                       concurrency)

        await _both(scenario, tool, dataq, round_no, work)
        check_arrived(records, work / "store", by_checksum=True)


async def _both(scenario: Scenario, tool: Callable[[], float], dataq: Callable[[], Awaitable[float]],
                round_no: int, work: Path) -> None:
    await in_turn(round_no, [(scenario.tool, lambda: asyncio.to_thread(tool)), (scenario.dataq, dataq)],
                  (work, scenario.count * scenario.size))


RECYCLED_CHUNK = b"\0" * (1 << 20)


def recycle_pages(directory: Path, size: int) -> None:
    """Write ``size`` bytes to a file in ``directory`` and delete it: its page-cache pages go back to the kernel's
    free lists, and the next writes take them first.

    The guest memory of this benchmark's VM is backed by its host on first touch: writing files into memory the
    guest had never used ran at about 300 MB/s, three times slower than into memory freed before (``cp -r`` of
    270 MB: 0.84-0.92 s against 0.10 s). Without this, whichever run of a round came second paid for the host's
    page faults and the ratio measured the VM."""
    path = directory / ".recycled-pages"
    with open(path, "wb") as blob:
        for _ in range(-(-size // len(RECYCLED_CHUNK))):
            blob.write(RECYCLED_CHUNK)
    path.unlink()


async def in_turn(round_no: int, runs: list[tuple[list[float], Callable[[], Awaitable[float]]]],
                  recycled: tuple[Path, int] | None = None) -> None:
    """Each run in order (reversed in odd rounds), its seconds appended to its list; with ``recycled`` (a
    directory and the bytes a run writes), twice those bytes of page cache freed before each run
    (:func:`recycle_pages`)."""
    # Each starts with no dirty pages: the one before's writes, still in the page cache, would otherwise throttle
    # the next one's (rsync's receiver writes without syncing).
    for times, run in runs[::-1] if round_no % 2 else runs:
        if recycled is not None:
            await asyncio.to_thread(recycle_pages, recycled[0], 2 * recycled[1])
        await asyncio.to_thread(timed, ["sync"])
        times.append(await run())


def version_of_rsync() -> str:
    return subprocess.run(["rsync", "--version"], check=True, capture_output=True, text=True).stdout.split("\n")[0]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round, 300 small files, 4 large")
    parser.add_argument("--only", choices=("network_move", "disk_store"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=None,
                        help="the pop daemon's (default 256); with --whole: a tuned column at this concurrency")
    parser.add_argument("--whole", action="store_true", help="the whole path, feed --scan to done, dataq's defaults")
    parser.add_argument("--checksum", metavar="ALGO", help="with --whole: checksum = ALGO in the queue's table")
    parser.add_argument("--source-check", choices=("read",),
                        help="with --whole: source_check = \"read\" in the queue's table (every source hashed again)")
    parser.add_argument("--plain-copy", action="store_true",
                        help="disk_store's baseline: cp -r and sync alone, checking nothing (before 2026-11-29)")
    parser.add_argument("--rsyncd-nodelay", action="store_true",
                        help="the rsync daemon with `socket options = TCP_NODELAY` (docs/actions.md advises it)")
    parser.add_argument("--rsyncd-max-connections", type=int, default=0, metavar="N",
                        help="the rsync daemon's module with `max connections = N` (default 0: unlimited)")
    args = parser.parse_args()
    RSYNCD.update(nodelay=args.rsyncd_nodelay, max_connections=args.rsyncd_max_connections)
    BASELINE["plain_copy"] = args.plain_copy
    if args.quick:
        args.rounds, args.small, args.large = 1, 300, 4
    actions = [args.only] if args.only else ["network_move", "disk_store"]
    if args.whole:
        from bench.whole_path import run_whole  # it imports this module's helpers

        await run_whole(args, actions)
        return
    if args.checksum or args.source_check:
        parser.error("--checksum and --source-check go with --whole")
    args.concurrency = args.concurrency or POP_CONCURRENCY
    scenarios = [Scenario(action, label, count, size, [], [], [])
                 for action in actions for label, count, size in (("small files", args.small, SMALL_BYTES),
                                                                  ("large files", args.large, LARGE_BYTES))]
    load_before = os.getloadavg()[0]
    await in_rounds(scenarios, args.rounds, "dataq-bench-move-",
                    lambda scenario, work, url, round_no: one_round(scenario, work, url, args.concurrency, round_no))
    rsync_version = await asyncio.to_thread(version_of_rsync)
    where = os.environ.get("BENCH_DIR") or tempfile.gettempdir()
    print(f"dataq move benchmark: {args.rounds} round(s), medians; pop concurrency {args.concurrency}; "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}; {rsync_version.strip()}; files in "
          f"{where} (ext4 journal: {journaled(Path(where))}: bench/recently_deleted.py)")
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print()
    print("| action | files | count | MB | plain tool s | dataq s | ratio | ceiling | dataq files/s | dataq MB/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for scenario in scenarios:
        print(scenario.row())
    print()
    print("rerun: .venv/bin/python bench/move.py [--quick] [--only network_move|disk_store] [--rounds N] "
          "[--concurrency N] [--small N] [--plain-copy]; the whole path: --whole")


if __name__ == "__main__":
    asyncio.run(main())
