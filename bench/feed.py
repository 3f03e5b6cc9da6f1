"""The store-and-forward feeder (``dataq feed --watch DIR``): files/s and MB/s against md5sum, and the spool's cost.

**Feeding** a directory of 10,000 files of 4 KiB and one of 20 files of 64 MiB (``--quick``: 2,000 files and
20 x 16 MiB), random bytes, in a temporary directory under ``--workdir`` (default: the system's temporary
directory; its file system is printed). The files are written, ``sync``ed (no writeback during the timings) and
read once before anything is timed, so every measurement reads them from a warm page cache. Each round, in
alternating order:

* ``md5sum``: ``find DIR -type f -print0 | xargs -0 md5sum > /dev/null`` (one md5sum process at a time), the
  target's yardstick; also ``xargs -P CPUs`` as information (the feeder hashes on a thread per CPU);
* the feeder: :func:`dataq.feed.spooled.watch_and_forward` on the directory (``settle`` 0: the scan at start takes
  every file at once), a fresh spool, window 1,000 (``dataq feed``'s default), on uvloop like ``dataq feed``,
  sending to a push daemon on a free loopback port (``--daemon inprocess``: a task of the same event loop, the
  default; ``subprocess``: ``dataq push``) over a private redis-server (``appendfsync always``). Timed from the
  call until every record is in the queue's active list *and* the spool holds nothing pending (the answers
  resolved); then the feeder is stopped, and every record's id and path are checked against the files' md5. The
  spool's ``add`` calls (fsynced transactions) and the forwarder's ``pending`` reads are counted on the way (a
  wrapper around the two methods): records per transaction show how well the intake groups its commits.

Targets (the issue): the feeder's MB/s on large files >= 0.9 of md5sum's, >= 2,000 small files/s.

**The spool's cost per record** on the same disk (`bench/spool_cost.py`): :meth:`Spool.add` of 512 records per
transaction (as the intake batches) and of one record per transaction, :meth:`Spool.resolve` alike, the ``known``
look-up the intake makes per file, and a bare loop of ``pwrite`` 4 KiB + ``os.fsync`` in the same directory: a
commit of the spool (SQLite, WAL, ``synchronous = FULL``) costs one such fsync.

CPU: the feeding process's user+system seconds (getrusage; with ``--daemon inprocess`` it includes the push
daemon) and redis-server's (and the push daemon's, as a subprocess) from /proc.

    .venv/bin/python bench/feed.py            # full run, 3 rounds (under a minute; 1.4 GB in the work directory)
    .venv/bin/python bench/feed.py --quick    # 2,000 small files, 20 x 16 MiB, 1 round (under 10 s)
    .venv/bin/python bench/feed.py --daemon subprocess --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.push import LOAD_BEFORE, cpu_seconds, machine, push_daemon
from bench.spool_cost import SPOOL_BATCH, spool_costs
from dataq.config import MetricsSettings, PushSettings, QueueSettings, RedisSettings, Settings
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.feed.spool import Entry, Pending, Spool
from dataq.feed.spool_status import read_spool_status
from dataq.feed.spooled import Link, watch_and_forward
from dataq.feed.watch import WatchOptions
from dataq.logs import configure_logging
from dataq.push.daemon import run_push_daemon
from dataq.runtime.loop import run_daemon
from dataq.store import QueueList, QueueStore

QUEUE = "transfer"
LOOPBACK = "127.0.0.1"
KIB, MIB, MB = 1024, 1024 * 1024, 1_000_000
WINDOW = 1000
"""Records per transaction of the intake (dataq.feed.intake.BATCH)."""
POLL = 0.005
FEED_TIMEOUT = 600.0
STARTUP_TIMEOUT = 20.0
TARGET_LARGE_RATIO = 0.9
TARGET_SMALL_FILES_S = 2000


@dataclass(frozen=True)
class Case:
    name: str
    count: int
    size: int

    @property
    def megabytes(self) -> float:
        return self.count * self.size / MB


@dataclass(frozen=True)
class Plan:
    cases: tuple[Case, ...]
    spool_batched: int
    """Records added (and resolved) 512 per transaction."""
    spool_single: int
    """Records added (and resolved) one per transaction, and fsyncs of the bare loop."""


FULL = Plan((Case("small", 10_000, 4 * KIB), Case("large", 20, 64 * MIB)), 20_000, 1_000)
QUICK = Plan((Case("small", 2_000, 4 * KIB), Case("large", 20, 16 * MIB)), 4_000, 300)


@dataclass
class Timing:
    seconds: float
    cpu: float
    """CPU seconds of the timed process(es): md5sum's, or the feeding process's."""
    redis_cpu: float = 0.0
    daemon_cpu: float | None = None
    """The push daemon's CPU seconds when it is a subprocess (None: it is in the feeding process)."""
    commits: int = 0
    """The feeder's ``Spool.add`` calls (one fsynced transaction each)."""
    reads: int = 0
    """The forwarder's ``Spool.pending`` calls."""


@dataclass
class Results:
    md5sum: list[Timing] = field(default_factory=list)
    md5sum_parallel: list[Timing] = field(default_factory=list)
    feeder: list[Timing] = field(default_factory=list)


# --- files ---------------------------------------------------------------------------------------------------


def make_files(directory: Path, case: Case) -> dict[str, str]:
    """``case.count`` files of ``case.size`` random bytes in ``directory``: md5 -> path."""
    directory.mkdir(parents=True)
    expected: dict[str, str] = {}
    chunk = min(case.size, 4 * MIB)
    for n in range(case.count):
        path = directory / f"f{n:06d}.fits"
        digest = hashlib.md5(usedforsecurity=False)
        with open(path, "wb") as out:
            left = case.size
            while left:
                data = os.urandom(min(chunk, left))
                digest.update(data)
                out.write(data)
                left -= len(data)
        expected[digest.hexdigest()] = str(path)
    return expected


def read_all(directory: Path) -> None:
    """Read every file once: both contenders then read from the page cache."""
    for path in directory.iterdir():
        with open(path, "rb", buffering=0) as source:
            while source.read(MIB):
                pass


def file_system(path: Path) -> str:
    """The type and device of the file system holding ``path`` (from /proc/mounts)."""
    best, found = "", "unknown"
    real = str(path.resolve())
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            device, mount, kind, *_ = line.split()
            if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                best, found = mount, f"{kind} ({device} on {mount})"
    return found


# --- md5sum --------------------------------------------------------------------------------------------------


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_md5sum(directory: Path, case: Case, parallel: int = 1) -> Timing:
    """``find | xargs md5sum`` over the directory; with ``parallel`` > 1, that many md5sum processes at once."""
    spread = f"-P {parallel} -n {max(1, case.count // (4 * parallel))} " if parallel > 1 else ""
    command = f"find {shlex.quote(str(directory))} -type f -print0 | xargs -0 {spread}md5sum > /dev/null"
    cpu = children_cpu()
    began = time.perf_counter()
    subprocess.run(["sh", "-c", command], check=True)
    return Timing(time.perf_counter() - began, children_cpu() - cpu)


# --- the feeder ----------------------------------------------------------------------------------------------


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Daemon:
    """The push daemon the feeder sends to: a task of this loop, or ``dataq push`` as a subprocess."""

    def __init__(self, port: int, pid: int | None) -> None:
        self.port, self.pid = port, pid

    def cpu(self) -> float | None:
        return cpu_seconds(self.pid) if self.pid is not None else None


@contextlib.asynccontextmanager
async def in_process_daemon(redis_url: str, workdir: Path) -> AsyncIterator[Daemon]:
    settings = Settings(
        data_dir=str(workdir / "push"),
        redis=RedisSettings(url=redis_url),
        push=PushSettings(host=LOOPBACK, port=0),
        metrics=MetricsSettings(enabled=False),
        queues={QUEUE: QueueSettings(QUEUE, max_queue_size=10_000_000)},
    )
    stop = asyncio.Event()
    bound: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_push_daemon(settings, QUEUE, stop=stop, ready=bound.set_result))
    waiting: set[asyncio.Future[Any]] = {task, bound}
    done, _ = await asyncio.wait(waiting, timeout=STARTUP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
    if bound not in done:
        stop.set()
        if task in done:
            task.result()
        raise SystemExit("the push daemon did not start in time")
    try:
        yield Daemon(bound.result()[1], None)
    finally:
        stop.set()
        await asyncio.wait_for(task, STARTUP_TIMEOUT)


@contextlib.asynccontextmanager
async def subprocess_daemon(redis_url: str, workdir: Path) -> AsyncIterator[Daemon]:
    with push_daemon(workdir / "push", redis_url) as (port, pid):
        yield Daemon(port, pid)


@contextlib.contextmanager
def counted(timing: Timing) -> Iterator[None]:
    """Count the spool's ``add`` and ``pending`` calls into ``timing`` (a wrapper of a few hundred ns a call)."""
    add, pending = Spool.add, Spool.pending

    async def counted_add(self: Spool, entries: Sequence[Entry]) -> None:
        timing.commits += 1
        await add(self, entries)

    async def counted_pending(self: Spool, after: int, limit: int) -> list[Pending]:
        timing.reads += 1
        return await pending(self, after, limit)

    Spool.add, Spool.pending = counted_add, counted_pending  # type: ignore[method-assign]
    try:
        yield
    finally:
        Spool.add, Spool.pending = add, pending  # type: ignore[method-assign]


async def run_feeder(directory: Path, spool: Path, case: Case, expected: dict[str, str], daemon: Daemon,
                     store: QueueStore, redis_pid: int) -> Timing:
    """Feed ``directory`` through a fresh ``spool`` until every record is queued and resolved; timed."""
    await store.clear()
    options = WatchOptions(root=str(directory), settle=0)
    link = Link(((LOOPBACK, daemon.port),), window=WINDOW)
    stop = asyncio.Event()
    timing = Timing(0.0, 0.0)
    with counted(timing):
        await feed(options, spool, link, stop, case, daemon, store, redis_pid, timing)
    queued = {record.checksum: record.path for record in await store.list_records(QueueList.ACTIVE)}
    if queued != expected:
        raise SystemExit(f"the queue holds {len(queued)} records, not the {len(expected)} files' ids and paths")
    if read_spool_status(str(spool)).refused:
        raise SystemExit("records were refused")
    return timing


async def feed(options: WatchOptions, spool: Path, link: Link, stop: asyncio.Event, case: Case, daemon: Daemon,
               store: QueueStore, redis_pid: int, timing: Timing) -> None:
    cpu, redis_cpu, daemon_cpu = process_cpu(), cpu_seconds(redis_pid), daemon.cpu()
    began = time.perf_counter()
    task = asyncio.create_task(watch_and_forward(options, str(spool), link, stop))
    try:
        while True:
            if task.done():
                task.result()
                raise SystemExit("the feeder stopped before it had fed every file")
            if await store.r.llen(store.keys.active) >= case.count:
                status = await asyncio.to_thread(read_spool_status, str(spool))
                if status.pending == 0:
                    break
            if time.perf_counter() - began > FEED_TIMEOUT:
                raise SystemExit(f"the feeder did not feed {case.count} files within {FEED_TIMEOUT:.0f} s")
            await asyncio.sleep(POLL)
        timing.seconds = time.perf_counter() - began
        timing.cpu, timing.redis_cpu = process_cpu() - cpu, cpu_seconds(redis_pid) - redis_cpu
        if daemon_cpu is not None:
            timing.daemon_cpu = daemon.cpu() - daemon_cpu  # type: ignore[operator]
    finally:
        stop.set()
        await asyncio.wait_for(task, STARTUP_TIMEOUT)


# --- the run -------------------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values)


async def run(plan: Plan, repeat: int, mode: str, workdir: str | None) -> None:
    cpus = os.cpu_count() or 1
    results = {case.name: Results() for case in plan.cases}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dataq-bench-feed-", dir=workdir) as tmp:
        work = Path(tmp)
        where = file_system(work)
        print(f"working in {work}: {where}", file=sys.stderr)
        made: dict[str, dict[str, str]] = {}
        for case in plan.cases:
            made[case.name] = make_files(work / case.name, case)
        os.sync()  # no writeback of the files during the timings
        for case in plan.cases:
            read_all(work / case.name)
        print(f"  wrote {sum(c.count for c in plan.cases):,} files in {time.perf_counter() - began:.1f} s",
              file=sys.stderr)

        redis = EmbeddedRedis(work / "redis", port=0, appendfsync="always")
        redis.start()
        assert redis.pid is not None
        store = QueueStore.from_url(redis.url, QUEUE)
        starting: Callable[[str, Path], AbstractAsyncContextManager[Daemon]] = (
            in_process_daemon if mode == "inprocess" else subprocess_daemon)
        try:
            async with starting(redis.url, work) as daemon:
                spools = 0
                for round_ in range(repeat):
                    for case in plan.cases:
                        directory, result = work / case.name, results[case.name]

                        def tools(case: Case = case, directory: Path = directory, result: Results = result) -> None:
                            result.md5sum.append(run_md5sum(directory, case))
                            result.md5sum_parallel.append(run_md5sum(directory, case, cpus))

                        if round_ % 2 == 0:
                            tools()
                        spools += 1
                        result.feeder.append(await run_feeder(directory, work / f"spool{spools}", case,
                                                              made[case.name], daemon, store, redis.pid))
                        if round_ % 2 == 1:
                            tools()
                        feeder, md5 = result.feeder[-1], result.md5sum[-1]
                        print(f"  round {round_ + 1}, {case.count:,} x {case.size // KIB:,} KiB: md5sum "
                              f"{md5.seconds:.2f} s, feeder {feeder.seconds:.2f} s "
                              f"({case.count / feeder.seconds:,.0f} files/s, {case.megabytes / feeder.seconds:,.0f}"
                              f" MB/s; {md5.seconds / feeder.seconds:.2f} of md5sum)", file=sys.stderr)
        finally:
            await store.close()
            redis.stop()
        costs = await spool_costs(work, plan.spool_batched, plan.spool_single)
    elapsed = time.perf_counter() - began

    print(f"\nfeeder (`dataq feed --watch`: hash + spool + send), median of {repeat} round(s); "
          f"{'quick' if plan is QUICK else 'full'} run, {elapsed:.0f} s in all")
    print(f"machine: {machine()}; load average before the run: {LOAD_BEFORE}")
    print(f"files: random bytes in {where}, written and synced, then read once: every timing reads a warm page "
          "cache")
    daemon_kind = "a task of the feeder's event loop (uvloop)" if mode == "inprocess" else "`dataq push`, a subprocess"
    print(f"push daemon: {daemon_kind}; redis-server with appendfsync always; feeder window 1,000, spool fresh "
          "each run\n")
    print("| files | MB | md5sum s | md5sum files/s | md5sum MB/s | feeder s | feeder files/s | feeder MB/s | "
          f"**feeder / md5sum** (per round) | target | md5sum -P{cpus} MB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for case in plan.cases:
        result = results[case.name]
        md5_s = median([t.seconds for t in result.md5sum])
        fed_s = median([t.seconds for t in result.feeder])
        parallel = median([t.seconds for t in result.md5sum_parallel])
        ratios = [m.seconds / f.seconds for m, f in zip(result.md5sum, result.feeder, strict=True)]
        if case.name == "small":
            rate = case.count / fed_s
            target = f"≥ {TARGET_SMALL_FILES_S:,} files/s: {'met' if rate >= TARGET_SMALL_FILES_S else 'NOT met'}"
        else:
            target = (f"≥ {TARGET_LARGE_RATIO} of md5sum: "
                      f"{'met' if median(ratios) >= TARGET_LARGE_RATIO else 'NOT met'}")
        print(f"| {case.count:,} x {case.size // KIB:,} KiB | {case.megabytes:,.0f} | {md5_s:.2f} | "
              f"{case.count / md5_s:,.0f} | {case.megabytes / md5_s:,.0f} | {fed_s:.2f} | "
              f"{case.count / fed_s:,.0f} | {case.megabytes / fed_s:,.0f} | **{median(ratios):.2f}** "
              f"({', '.join(f'{r:.2f}' for r in ratios)}) | {target} | {case.megabytes / parallel:,.0f} |")

    print("\nCPU seconds per run (median): md5sum; the feeding process (user + system"
          + (", the push daemon included" if mode == "inprocess" else "") + "); "
          + ("" if mode == "inprocess" else "the push daemon; ") + "redis-server\n")
    print("| files | md5sum | feeding process | " + ("" if mode == "inprocess" else "push daemon | ")
          + "redis-server | feeding process, µs per file | spool commits (add) | records per commit | "
            "forwarder reads (pending) |")
    print("|---|---:|---:|" + ("" if mode == "inprocess" else "---:|") + "---:|---:|---:|---:|---:|")
    for case in plan.cases:
        result = results[case.name]
        feeder_cpu = median([t.cpu for t in result.feeder])
        commits = median([t.commits for t in result.feeder])
        daemon_cpu = "" if mode == "inprocess" else f"{median([t.daemon_cpu or 0.0 for t in result.feeder]):.2f} | "
        print(f"| {case.count:,} x {case.size // KIB:,} KiB | {median([t.cpu for t in result.md5sum]):.2f} | "
              f"{feeder_cpu:.2f} | {daemon_cpu}{median([t.redis_cpu for t in result.feeder]):.2f} | "
              f"{feeder_cpu / case.count * 1e6:,.0f} | {commits:,.0f} | {case.count / commits:,.1f} | "
              f"{median([t.reads for t in result.feeder]):,.0f} |")

    print(f"\nthe spool's cost per record (SQLite, WAL, synchronous = FULL; same file system; "
          f"{plan.spool_batched:,} records batched, {plan.spool_single:,} one at a time):\n")
    print("| operation | µs per record | in bare fsyncs |")
    print("|---|---:|---:|")
    rows = (
        (f"add, {SPOOL_BATCH} records per transaction", costs.add_batched),
        ("add, 1 record per transaction", costs.add_single),
        (f"resolve, {SPOOL_BATCH} records per transaction", costs.resolve_batched),
        ("resolve, 1 record per transaction", costs.resolve_single),
        ("known (the intake's look-up per file, no write)", costs.known),
        ("bare loop: pwrite 4 KiB + os.fsync (per call)", costs.fsync),
        ("bare loop: pwrite 4 KiB + os.fdatasync (per call; SQLite's, one per commit)", costs.fdatasync),
    )
    for label, seconds in rows:
        print(f"| {label} | {seconds * 1e6:,.1f} | {seconds / costs.fsync:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="2,000 small files, 20 x 16 MiB, 1 round")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3, --quick 1)")
    parser.add_argument("--daemon", choices=("inprocess", "subprocess"), default="inprocess",
                        help="the push daemon: a task of the feeder's loop (default) or `dataq push`")
    parser.add_argument("--workdir", default=None, help="where the temporary directory goes (default: $TMPDIR)")
    args = parser.parse_args()
    configure_logging(component="bench", level="warning", fmt="console")
    plan = QUICK if args.quick else FULL
    repeat = args.repeat or (1 if args.quick else 3)
    # The loop `dataq feed` runs on (uvloop when installed).
    run_daemon(run(plan, repeat, args.daemon, args.workdir))


if __name__ == "__main__":
    main()
