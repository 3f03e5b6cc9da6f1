"""dataq with its default settings against lsyncd 2.2 (``delay = 1``), side by side on one machine, as ratios.

Both send to one ``rsync --daemon`` on loopback (without ``socket options``, Debian's default, or with ``socket
options = TCP_NODELAY`` with ``--rsyncd-nodelay``, as ``docs/actions.md`` advises), each into its own subdirectory
of one module (``max connections`` unlimited, or N with ``--rsyncd-max-connections N``), from a source directory
of its own; they never run at the same time. Per round and workload, each system gets a fresh source directory, a
fresh destination directory and a fresh start:

* **lsyncd** (``settings{nodaemon = true}``, ``sync{default.rsync, source = SRC, target = "rsync://.../m/lsyncd/RUN/",
  delay = 1, rsync = {binary = ...}}``: otherwise lsyncd's defaults);
* **dataq defaults**: ``dataq run`` (push and pop daemons, web console) and ``dataq feed --watch SRC``, as
  subprocesses, on a private redis-server (``appendfsync always``, as dataq's embedded one) on a free loopback
  port. The settings give only what must be given: the queue's ``actions = ["network_move"]`` and its
  ``destination``, the Redis URL, directories, and free ports (push; web and metrics ephemeral) so nothing else on
  the host is touched. Layout ``{name}``, ``verify`` on, ``[pop] concurrency`` 4: the defaults. ``--concurrency N``
  adds a column "dataq concurrency N" (tuned): ``[pop] concurrency = N``, nothing else changed.

Each system first moves a warm-up file (so its watches are up). Then, after a ``sync``, a writer process of
its own (as the program whose files are watched; it holds their bytes before it starts) writes:

* **trickle**: 100 files of 100 KB written at 10 files/s, each written whole and closed (no temporary name); a
  file's latency is its close -> its arrival at the destination, seen by inotify on the destination directory
  (``IN_CLOSE_WRITE | IN_MOVED_TO``: rsync writes a hidden temporary file and renames it) with the expected size.
  p50 and p99 (nearest rank) in ms.
* **burst**: ``--burst`` files of 20 KB (1,000 by default) written as fast as possible: the first file's close ->
  the last file's arrival; for dataq, -> the later of that and the queue's ``done`` counter reaching every record
  (polled every 5 ms), in seconds. Three more rows: the burst to its last arrival alone
  (for dataq, without "done"), how long writing it took (the writer shares the CPUs with the system), and the
  time the burst's CPU alone needs: the CPU seconds of the system's processes (Redis and the rsync daemon
  included, from ``/proc``) and of the writer, over the CPUs. A system that takes about that long is bound by
  the CPUs; one that takes longer waits (lsyncd its delay). The notes (``--json``) give each process's CPU
  seconds and, in brackets, those spent in the kernel, the writer's too.

After each run every file at the destination must be the source's bytes (md5) and nothing else be there, and no
dataq record may be inactive, active or in flight. Rounds (``--rounds``) rotate which system goes first; the
table gives medians, and ratio = lsyncd / dataq (above 1: dataq is faster). Every process started is stopped
(process groups, SIGTERM then SIGKILL) on success, error, SIGTERM or Ctrl-C.

    .venv/bin/python bench/lsyncd.py [--burst 1000] [--rounds 3] [--concurrency N] [--rsyncd-nodelay]
        [--rsyncd-max-connections N] [--json]

lsyncd must be installed: ``make bench-deps``, or ``apt-get install --no-install-recommends lsyncd``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncinotify import Inotify, Mask

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.e2e import load, percentile, run_cleanly
from bench.move import version_of_rsync
from dataq.embedded.redis_server import EmbeddedRedis, free_port
from dataq.store import QueueStore
from testbed.rsync import RsyncDaemon
from testbed.settings_file import write_tables

TRICKLE_FILES, TRICKLE_BYTES, TRICKLE_RATE = 100, 100_000, 10.0
BURST_BYTES = 20_000
WARMUP = "warmup.bin"
MODULE = "m"
READY_TIMEOUT = 120.0
RUN_TIMEOUT = 1800.0
STOP_TIMEOUT = 60.0
POLL = 0.005
ODD_COUNTERS = {"failed", "duplicate", "orphaned", "reclaimed", "deactivated"}
"""Counters of a queue that should stay at 0 in these runs; reported below the table if not."""
DATAQ = [sys.executable, "-c", "from dataq.cli.main import main; main()"]
RERUN = (".venv/bin/python bench/lsyncd.py [--burst 1000] [--rounds 3] [--concurrency N] [--rsyncd-nodelay] "
         "[--rsyncd-max-connections N] [--json]")
LSYNCD_CONFIG = """settings {{
    nodaemon = true,
    logfile = {log},
    statusFile = {status},
}}
sync {{
    default.rsync,
    source = {source},
    target = {target},
    delay = 1,
    rsync = {{ binary = {rsync} }},
}}
"""


@dataclass
class System:
    label: str
    concurrency: int | None = None  # None: lsyncd
    lsyncd: bool = False
    results: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return "lsyncd" if self.lsyncd else f"dataq{self.concurrency or ''}"

    def add(self, row: str, value: float) -> None:
        self.results.setdefault(row, []).append(value)


class Arrivals:
    """When each expected name becomes a file of its expected size in ``directory`` (inotify, monotonic time)."""

    def __init__(self, directory: Path, sizes: dict[str, int]) -> None:
        self.directory, self.sizes = directory, sizes
        self.at: dict[str, float] = {}
        self.overflowed = False
        self._inotify = Inotify()
        self._inotify.add_watch(directory, Mask.CLOSE_WRITE | Mask.MOVED_TO)
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self._inotify:
            now = time.monotonic()
            self.overflowed |= Mask.Q_OVERFLOW in event.mask
            name = str(event.name) if event.name is not None else ""
            if name in self.sizes and name not in self.at:
                with contextlib.suppress(OSError):
                    if os.stat(self.directory / name).st_size == self.sizes[name]:
                        self.at[name] = now

    def have(self, names: list[str]) -> bool:
        if self.overflowed:
            raise SystemExit("the inotify queue overflowed: raise fs.inotify.max_queued_events")
        if self._task.done():
            self._task.result()  # its error, if any
        return all(name in self.at for name in names)

    def close(self) -> None:
        self._task.cancel()
        self._inotify.close()


def spawn(argv: list[str], stderr: Path) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DATAQ_")}
    with open(stderr, "wb") as err:  # its own session: Ctrl-C reaches the bench, which stops it
        return subprocess.Popen(argv, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to its process group (lsyncd's rsyncs, ...); SIGKILL to the group after STOP_TIMEOUT. Under
    BENCH_PROFILE, SIGINT: py-spy writes its samples then, and dataq stops on it as on SIGTERM."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT if os.environ.get("BENCH_PROFILE") else signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


async def until(condition: Callable[[], Awaitable[bool]], within: float, what: str,
                processes: list[subprocess.Popen[bytes]]) -> float:
    """Poll ``condition`` every POLL s; the monotonic time it first held. SystemExit if a process exits first."""
    deadline = time.monotonic() + within
    while not await condition():
        if dead := [p for p in processes if p.poll() is not None]:
            raise SystemExit(f"{dead[0].args!r} exited with {dead[0].returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(POLL)
    return time.monotonic()


@contextlib.asynccontextmanager
async def run_lsyncd(home: Path, source: Path, target: str) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    lua = {key: json.dumps(str(value)) for key, value in (
        ("log", home / "lsyncd.log"), ("status", home / "lsyncd.status"), ("source", source),
        ("target", target + "/"), ("rsync", shutil.which("rsync")))}
    config = home / "lsyncd.lua"
    config.write_text(LSYNCD_CONFIG.format(**lua))
    process = spawn(["lsyncd", str(config)], home / "lsyncd.stderr")
    try:
        yield [process]
    finally:
        stop(process)


@contextlib.asynccontextmanager
async def run_dataq(home: Path, source: Path, destination: str, redis_url: str, queue: str,
                    concurrency: int | None) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    tables: dict[str, dict[str, Any]] = {
        "redis": {"url": redis_url}, "log": {"dir": str(home / "log")}, "push": {"port": free_port()},
        "metrics": {"push_port": 0, "pop_port": 0}, "web": {"port": 0},
        **({"pop": {"concurrency": concurrency}} if concurrency else {}),
        f"queues.{queue}": {"actions": ["network_move"]},
        f"queues.{queue}.network_move": {"destination": destination},
    }
    config = str(write_tables(home / "dataq.toml", home / "data", tables))
    processes: list[subprocess.Popen[bytes]] = []
    profiled = os.environ.get("BENCH_PROFILE")

    def command(name: str, *args: str) -> list[str]:
        # BENCH_PROFILE=DIR: each dataq process under py-spy, its samples (collapsed stacks) in DIR/NAME.txt.
        if not profiled:
            return [*DATAQ, *args]
        return ["py-spy", "record", "--subprocesses", "-r", "500", "-f", "raw",
                "-o", f"{profiled}/{home.parent.name}-{name}.txt", "--", *DATAQ, *args]

    try:
        processes.append(spawn(command("run", "run", "--config", config), home / "run.stderr"))
        processes.append(spawn(command("feed", "feed", "--config", config, "--watch", str(source)),
                               home / "feed.stderr"))
        yield processes
    finally:
        for process in reversed(processes):  # the feeder first, then the suite (it stops its daemons)
            stop(process)


def tree_times(leaders: list[int]) -> dict[str, tuple[float, float]]:
    """CPU seconds, all (user + system) and in the kernel (system), with reaped children's (rsync clients), of the
    processes ``leaders`` and every process descended from them, by dataq command (or program) name."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    seconds: dict[int, tuple[float, float]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
            words = [w.decode(errors="replace") for w in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0") if w]
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        pid = int(entry)
        parents[pid] = int(fields[1])
        names[pid] = next((w for w in words if w in ("run", "push", "pop", "web", "feed")),
                          os.path.basename(words[0]) if words else "?")
        utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
        seconds[pid] = ((utime + stime + cutime + cstime) / tick, (stime + cstime) / tick)
    roots = set(leaders)
    used: dict[str, tuple[float, float]] = {}
    for pid, (total, kernel) in seconds.items():
        ancestor = pid
        while ancestor not in roots and ancestor > 1:
            ancestor = parents.get(ancestor, 0)
        if ancestor in roots:
            was_total, was_kernel = used.get(names[pid], (0.0, 0.0))
            used[names[pid]] = (was_total + total, was_kernel + kernel)
    return used


def tree_cpu(leaders: list[int]) -> dict[str, float]:
    """:func:`tree_times`, all CPU seconds only."""
    return {name: total for name, (total, _) in tree_times(leaders).items()}


WRITER = """
import json, os, sys, time
directory, rate, blob = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
names, sizes = json.loads(sys.stdin.read())
with open(blob, "rb") as source:
    data = source.read()
os.unlink(blob)
sys.stdout.write("ready\\n")
sys.stdout.flush()
sys.stdin.close()
closes, offset = [], 0
began = time.monotonic()
for n, (name, size) in enumerate(zip(names, sizes)):
    if rate is not None:
        time.sleep(max(0.0, began + n / rate - time.monotonic()))
    with open(os.path.join(directory, name), "wb") as out:
        out.write(data[offset:offset + size])
    offset += size
    closes.append(time.monotonic())
sys.stdout.write(json.dumps(closes))
"""
"""The writer: its own process, like the program whose files a system watches. In the bench's process, its
thread would share the GIL with the bench's own event loop (arrivals seen by inotify, Redis polled), which is
busy while dataq delivers but idle while lsyncd waits out its delay: that would slow the writer beside dataq
only. CLOCK_MONOTONIC, which ``time.monotonic`` reads, is one clock for every process of the host."""


def write_files(directory: Path, files: dict[str, bytes],
                rate: float | None) -> tuple[list[float], float, float]:
    """Each file written whole and closed, at ``rate`` files/s or as fast as possible, by a process of its own
    that holds every file's bytes before it starts: the close times (monotonic), and the CPU seconds the writer
    spent, all and in the kernel (the bench's only child reaped meanwhile: the systems' processes are reaped once
    they stop)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.NamedTemporaryFile(dir=directory.parent, prefix=".writer-", delete=False) as blob:
        for data in files.values():
            blob.write(data)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), json.dumps(rate), blob.name],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert writer.stdin is not None and writer.stdout is not None
    writer.stdin.write(json.dumps([list(files), [len(data) for data in files.values()]]).encode())
    writer.stdin.close()
    if writer.stdout.readline() != b"ready\n":
        raise SystemExit(f"the writer did not start: exit {writer.wait()}")
    out = writer.stdout.read()
    if writer.wait() != 0:
        raise SystemExit(f"the writer failed with exit {writer.returncode}")
    closes: list[float] = json.loads(out)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return closes, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, after.ru_stime - before.ru_stime


def check_destination(directory: Path, files: dict[str, bytes]) -> None:
    found = {path.name for path in directory.iterdir()}
    if found != set(files):
        raise SystemExit(f"{directory}: {len(set(files) - found)} file(s) missing, unexpected: "
                         f"{sorted(found - set(files))[:5]}")
    for name, data in files.items():
        if hashlib.md5((directory / name).read_bytes()).digest() != hashlib.md5(data).digest():
            raise SystemExit(f"{directory / name} is not the source's bytes")


async def one_run(system: System, workload: str, count: int, work: Path, rsyncd: RsyncDaemon, redis_url: str,
                  run: str, shared: list[int]) -> None:
    """One workload through one system; ``shared``: the processes both systems use (Redis, the rsync daemon),
    whose CPU is counted with the system's."""
    home, source, destination = (work / run / system.kind, work / "src" / run / system.kind,
                                 work / "dest" / system.kind / run)
    for directory in (home, source, destination):
        directory.mkdir(parents=True)
    size, rate = (TRICKLE_BYTES, TRICKLE_RATE) if workload == "trickle" else (BURST_BYTES, None)
    files = {f"{workload}{n:05d}.fits": os.urandom(size) for n in range(count)}
    everything = {WARMUP: os.urandom(size), **files}
    arrivals = Arrivals(destination, {name: len(data) for name, data in everything.items()})
    url = rsyncd.url(MODULE, f"{system.kind}/{run}")
    queue = f"{run}{system.kind}".replace("-", "")
    store = None if system.lsyncd else QueueStore.from_url(redis_url, queue)

    async def done(records: int) -> bool:
        if store is None:
            return True
        counters = await store.counters()
        if counters.get("deactivated", 0):
            raise SystemExit(f"{system.label}: records went inactive: {await store.summary()}")
        return counters.get("done", 0) >= records

    started = (run_lsyncd(home, source, url) if system.lsyncd else
               run_dataq(home, source, url, redis_url, queue, system.concurrency))
    try:
        async with started as processes:
            (source / WARMUP).write_bytes(everything[WARMUP])

            async def warm() -> bool:
                return arrivals.have([WARMUP]) and await done(1)

            await until(warm, READY_TIMEOUT, f"{system.label}'s warm-up file", processes)
            await asyncio.to_thread(subprocess.run, ["sync"], check=True)
            watched = [process.pid for process in processes] + list(shared)
            before = tree_times(watched)
            closes, writer_cpu, writer_kernel = await asyncio.to_thread(write_files, source, files, rate)

            async def arrived() -> bool:
                return arrivals.have(list(files))

            await until(arrived, RUN_TIMEOUT, f"{system.label}'s {workload} files to arrive", processes)
            settled = await until(lambda: done(len(everything)), RUN_TIMEOUT, f"{system.label}'s records done",
                                  processes) if store is not None else 0.0
            after = tree_times(watched)
            cpu = {name: total - before.get(name, (0.0, 0.0))[0] for name, (total, _) in after.items()}
            kernel = {name: seconds - before.get(name, (0.0, 0.0))[1] for name, (_, seconds) in after.items()}
            system.notes.append(f"{run}: CPU s of its processes (of which in the kernel): "
                                + ", ".join(f"{name} {seconds:.2f} ({kernel.get(name, 0.0):.2f})"
                                            for name, seconds in sorted(cpu.items()))
                                + f"; the writer {writer_cpu:.2f} ({writer_kernel:.2f})")
            if store is not None:
                summary = await store.summary()
                if summary.inactive or summary.active or summary.in_flight or summary.delayed:
                    raise SystemExit(f"{system.label}: records left over: {summary}")
                odd = {k: v for k, v in summary.counters.items() if k in ODD_COUNTERS and v}
                if odd or summary.counters.get("done") != len(everything):
                    system.notes.append(f"{run}: done {summary.counters.get('done')} of {len(everything)}, {odd}")
    finally:
        arrivals.close()
        if store is not None:
            await store.close()
    if workload == "trickle":
        latencies = sorted(arrivals.at[name] - close for name, close in zip(files, closes, strict=True))
        system.add("trickle p50", percentile(latencies, 50) * 1000)
        system.add("trickle p99", percentile(latencies, 99) * 1000)
    else:
        system.add("burst arrived", max(arrivals.at.values()) - closes[0])
        system.add("burst written", closes[-1] - closes[0])
        system.add("burst", max(settled, *arrivals.at.values()) - closes[0])
        # Work that cannot take less than its CPU seconds spread over every core: the system's and the writer's.
        system.add("burst cpu bound", (sum(cpu.values()) + writer_cpu) / (os.cpu_count() or 1))
    await asyncio.to_thread(check_destination, destination, everything)
    shutil.rmtree(source)
    shutil.rmtree(destination)


def versions() -> str:
    lsyncd = subprocess.run(["lsyncd", "--version"], capture_output=True, text=True, check=False).stdout.strip()
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False).stdout
    return f"lsyncd {lsyncd.split()[-1]}; {' '.join(version_of_rsync().split())}; redis-server {redis.split()[2][2:]}"


def report(args: argparse.Namespace, systems: list[System], load_before: str) -> None:
    rows = [("trickle p50", f"trickle p50 ({TRICKLE_FILES} x {TRICKLE_BYTES // 1000} KB at {TRICKLE_RATE:g}/s), ms"),
            ("trickle p99", "trickle p99, ms"), ("burst", f"burst ({args.burst:,} x {BURST_BYTES // 1000} KB), s"),
            ("burst arrived", "burst, to the last arrival only (no done), s"),
            ("burst written", "burst, first close -> last close (the writer, slowed by the system), s"),
            ("burst cpu bound", "burst, CPU bound: (the system's CPU s + the writer's) / CPUs, s")]
    medians = {s.label: {row: statistics.median(s.results[row]) for row, _ in rows if row in s.results}
               for s in systems}
    lsyncd, dataqs = systems[0], systems[1:]
    if args.json or args.only or len(args.workloads) < 2:
        print(json.dumps({"rounds": args.rounds, "burst": args.burst, "concurrency": args.concurrency,
                          "rsyncd_nodelay": args.rsyncd_nodelay,
                          "rsyncd_max_connections": args.rsyncd_max_connections,
                          "medians": medians,
                          "values": {s.label: s.results for s in systems},
                          "notes": {s.label: s.notes for s in systems}}, indent=2))
        return
    print(f"dataq vs lsyncd: {args.rounds} round(s), medians; {os.cpu_count()} CPUs, Linux {platform.release()}, "
          f"Python {platform.python_version()}; {versions()}")
    print(f"load average (1, 5, 15 min): {load_before} before, {load()} after (other work on the host skews times)")
    print("dataq: `dataq run` + `dataq feed --watch SRC`, settings: the queue's actions and destination only "
          "(and Redis URL, directories, free ports)")
    print(f"rsync daemon: {'socket options = TCP_NODELAY' if args.rsyncd_nodelay else 'no socket options'}, "
          f"max connections = {args.rsyncd_max_connections}")
    print("ratio = lsyncd / dataq (above 1: dataq is faster)\n")
    header = f"| work | {lsyncd.label} |" + "".join(f" {s.label} | ratio |" for s in dataqs)
    print(header)
    print("| --- |" + " ---: |" * (header.count("|") - 2))
    for row, title in rows:
        scale = "{:,.2f}" if row.startswith("burst") else "{:,.0f}"
        base = medians[lsyncd.label][row]
        cells = "".join(f" {scale.format(medians[s.label][row])} | **{base / medians[s.label][row]:.2f}** |"
                        for s in dataqs)
        print(f"| {title} | {scale.format(base)} |{cells}")
    for system in systems:
        for note in system.notes:
            print(f"note: {system.label}, {note}")
    print(f"\nrerun: {RERUN}")


async def run(args: argparse.Namespace) -> None:
    load_before = load()
    systems = [System("lsyncd delay 1 s", lsyncd=True), System("dataq defaults")]
    if args.concurrency:
        systems.append(System(f"dataq concurrency {args.concurrency}", concurrency=args.concurrency))
    with tempfile.TemporaryDirectory(prefix="dataq-bench-lsyncd-", dir=os.environ.get("BENCH_DIR")) as temp, \
            EmbeddedRedis(Path(temp) / "redis", port=0, appendfsync="always") as redis:
        work = Path(temp)
        rsyncd = RsyncDaemon(work / "rsyncd", {MODULE: work / "dest"}, nodelay=args.rsyncd_nodelay,
                             max_connections=args.rsyncd_max_connections)
        rsyncd.start()
        try:
            for round_no in range(args.rounds):
                for workload, count in (("trickle", TRICKLE_FILES), ("burst", args.burst)):
                    if workload not in args.workloads:
                        continue
                    shift = round_no % len(systems)
                    for system in systems[shift:] + systems[:shift]:
                        if args.only and args.only not in system.label:
                            continue
                        print(f"round {round_no + 1}: {workload}, {system.label} ...", file=sys.stderr)
                        shared = [pid for pid in (redis.pid, rsyncd.process.pid if rsyncd.process else None) if pid]
                        await one_run(system, workload, count, work, rsyncd, redis.url, f"r{round_no}{workload}",
                                      shared)
        finally:
            rsyncd.stop()
    report(args, systems, load_before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst", type=int, default=1000, help="files of the burst (default 1,000)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; the table gives medians (default 1)")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="also run dataq with this [pop] concurrency (a 'tuned' column)")
    parser.add_argument("--json", action="store_true", help="print the medians and every value as JSON")
    parser.add_argument("--workloads", nargs="+", choices=("trickle", "burst"), default=("trickle", "burst"),
                        help="the workloads to run (default both)")
    parser.add_argument("--rsyncd-nodelay", action="store_true",
                        help="the rsync daemon with `socket options = TCP_NODELAY` (docs/actions.md advises it; "
                        "default: without, as Debian's rsyncd.conf)")
    parser.add_argument("--rsyncd-max-connections", type=int, default=0, metavar="N",
                        help="the rsync daemon's module with `max connections = N` (default 0: unlimited, rsync's "
                        "default); dataq sends four batches at once and must adapt to fewer")
    parser.add_argument("--only", default="", help="run only the systems whose label holds this (e.g. dataq): "
                        "for profiling; the table then needs every system")
    args = parser.parse_args()
    if shutil.which("lsyncd") is None:
        raise SystemExit("lsyncd is not installed: run `make bench-deps`, or "
                         "`apt-get install -y --no-install-recommends lsyncd`")
    run_cleanly(run(args))


if __name__ == "__main__":
    main()
