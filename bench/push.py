"""Push throughput: feeders -> ``dataq push`` -> Redis (AOF, fsync always), all on loopback.

Starts a private redis-server (``appendfsync always``: every acknowledged record is on disk) in a temporary
directory and the push daemon as a subprocess (``dataq push``, so it has a core of its own and the feeders do
not share its interpreter), then feeds unique records with :class:`dataq.feeder.Feeder` from this process
(1 or 4 feeders as asyncio tasks, each on its own connection) with windows of 1, 100, 1,000 and 10,000 records
in flight. Lines are formatted before the clock starts; the clock stops when the last reply is in. Every cell
checks that every record came back ``Pushed``. At window 1 (feeders that wait for each reply), each round also
measures the ceiling right after its cells: ``redis-benchmark`` with as many connections, one fsynced SET at a
time each, and prints dataq's rate as a ratio of it.

    .venv/bin/python bench/push.py            # full run: 3 rounds over every cell (under a minute)
    .venv/bin/python bench/push.py --quick    # fewer records per cell (a few seconds)
    .venv/bin/python bench/push.py --windows 1 --feeders 1 16    # the one-record path against its ceilings

The machine's other load shows in the rates (the load average is printed); the CPU time per record of each
process is steadier and says where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dataq.embedded.redis_server import EmbeddedRedis, free_port
from dataq.feed.client import Feeder
from dataq.runtime.loop import run_daemon
from dataq.store import QueueStore

QUEUE = "transfer"
WINDOWS = (1, 100, 1_000, 10_000)
FEEDERS = (1, 4)
RECORDS_FULL = {1: 5_000, 100: 100_000, 1_000: 200_000, 10_000: 200_000}
RECORDS_QUICK = {1: 1_000, 100: 20_000, 1_000: 40_000, 10_000: 40_000}
STARTUP_TIMEOUT = 20.0
LOAD_BEFORE = ", ".join(f"{load:.2f}" for load in os.getloadavg())


def lines(start: int, count: int) -> list[bytes]:
    """Record lines shaped like the 2014 seed's data, with unique md5-shaped ids."""
    return [
        b"/noao-tuc-z1/mtn/20140708/ct15m/smarts/c15e_140708_%09d_ori.fits.fz %032x %d\n" % (n, n, 9922 + n)
        for n in range(start, start + count)
    ]


SOURCES = [str(Path(__file__).resolve().parents[1] / name) for name in ("dataq", "cli", "actions")]


@functools.cache
def byte_compiled() -> None:
    """Byte-compile dataq's sources, once per bench, as installing a package does. An editable install in a shell
    with ``PYTHONDONTWRITEBYTECODE`` set (as this VM's) never writes them, and every ``dataq`` start then compiled
    some 40 modules again: 70-80 ms of a ``dataq feed --scan`` of 10 files (0.24-0.27 s against 0.16-0.19 s with
    them compiled), inside the time of the benches that start one."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *SOURCES], check=True, stdout=subprocess.DEVNULL)


def dataq_command() -> list[str]:
    """How to start ``dataq`` (its sources byte-compiled: :func:`byte_compiled`)."""
    byte_compiled()
    script = shutil.which("dataq", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-c", "from dataq.cli.main import main; main()"]


@contextlib.contextmanager
def push_daemon(workdir: Path, redis_url: str | None, *, redis_extra: str = "",
                queue: str = QUEUE, queue_extra: str = "") -> Iterator[tuple[int, int]]:
    """``dataq push`` of ``queue`` on a free port (on ``redis_url``, ``redis_extra`` lines in its ``[redis]`` table
    and ``queue_extra`` in the queue's): yields (port, pid)."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "dataq.toml"
    url = f'url = "{redis_url}"\n' if redis_url else ""
    config.write_text(
        f'data_dir = "{workdir}"\n[redis]\n{url}{redis_extra}[log]\ndir = "{workdir / "log"}"\nlevel = "warning"\n'
        f'format = "json"\n[metrics]\nenabled = false\n[push]\nport = {port}\n'
        f'[queues.{queue}]\nmax_queue_size = 10000000\n{queue_extra}'
    )
    with open(workdir / "push.stderr", "wb") as stderr:
        process = subprocess.Popen([*dataq_command(), "push", "--config", str(config)], stdout=subprocess.DEVNULL,
                                   stderr=stderr)
    try:
        wait_for_port(port, process, f"see {workdir / 'push.stderr'}")
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(30)


def wait_for_port(port: int, process: subprocess.Popen[bytes], where: str = "") -> None:
    """Until ``dataq push`` (``process``) accepts connections on ``port``; SystemExit if it exits first."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if process.poll() is not None:
            raise SystemExit(f"dataq push exited with {process.returncode}; {where}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("dataq push did not start") from None
            time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Cell:
    rate: float
    cpu: tuple[float, float, float]
    """CPU microseconds per record: daemon, redis-server, feeders."""


async def measure(port: int, pids: tuple[int, int], window: int, feeders: int, start: int, count: int) -> Cell:
    per_feeder = count // feeders
    batches = [lines(start + i * per_feeder, per_feeder) for i in range(feeders)]
    runs = [Feeder("127.0.0.1", port, window=window, keep_replies=False) for _ in range(feeders)]
    cpu_before = (cpu_seconds(pids[0]), cpu_seconds(pids[1]), time.process_time())
    began = time.perf_counter()
    results = await asyncio.gather(*(feeder.feed(batch) for feeder, batch in zip(runs, batches, strict=True)))
    elapsed = time.perf_counter() - began
    cpu_after = (cpu_seconds(pids[0]), cpu_seconds(pids[1]), time.process_time())
    pushed = sum(result.pushed for result in results)
    if pushed != per_feeder * feeders:
        raise SystemExit(f"only {pushed} of {per_feeder * feeders} records came back Pushed: {results}")
    cpu = tuple((after - before) / pushed * 1e6 for before, after in zip(cpu_before, cpu_after, strict=True))
    return Cell(pushed / elapsed, cpu)  # type: ignore[arg-type]


@dataclass
class Ceiling:
    rate: float
    """Writes/s of redis-benchmark."""
    client_cpu: float
    """redis-benchmark's own CPU µs per request: the socket work of one exchange (a send, a receive, a poll),
    in C. The push daemon makes two such exchanges per record, its feeder's and Redis's."""


def fsynced_round_trips(redis_url: str, count: int, connections: int = 1, pipeline: int = 1) -> Ceiling | None:
    """The ceiling for feeders that wait for each reply: writes/s of Redis's own C client (redis-benchmark),
    ``connections`` connections, ``pipeline`` SETs in flight each (one by default), against the same server (AOF,
    fsync always). Every acknowledged record needs one such write; None if redis-benchmark (Debian's redis-tools)
    is missing."""
    executable = shutil.which("redis-benchmark")
    if executable is None:
        return None
    host, port = redis_url.removeprefix("redis://").rsplit(":", 1)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Database 15 keeps its keys away from the queue's.
    result = subprocess.run([executable, "-h", host, "-p", port, "--dbnum", "15", "-c", str(connections), "-P",
                             str(pipeline), "-n", str(count), "-t", "set", "--csv"],
                            check=True, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / count * 1e6
    row = result.stdout.strip().splitlines()[-1].split(",")
    return Ceiling(float(row[1].strip('"')), cpu)


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    redis_version = subprocess.run(["redis-server", "--version"], check=False, capture_output=True,
                                   text=True).stdout.split()
    version = next((word.split("=")[1] for word in redis_version if word.startswith("v=")), "?")
    return (f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}, Python {platform.python_version()}, "
            f"redis-server {version}")


def cell_records(counts: dict[int, int], window: int, feeders: int) -> int:
    """Records of one cell: at window 1 each feeder sends the window's count (a feeder that waits for each reply
    is slow, and 16 of them would each send only a few hundred otherwise)."""
    return counts[window] * (feeders if window == 1 else 1)


async def run(quick: bool, repeat: int, windows: tuple[int, ...], feeder_counts: tuple[int, ...]) -> None:
    counts = RECORDS_QUICK if quick else RECORDS_FULL
    cells: dict[tuple[int, int], list[Cell]] = {(w, f): [] for w in windows for f in feeder_counts}
    ceilings: dict[int, list[Ceiling]] = {f: [] for f in feeder_counts}
    ratios: dict[int, list[float]] = {f: [] for f in feeder_counts}
    with tempfile.TemporaryDirectory(prefix="dataq-bench-") as tmp:
        workdir = Path(tmp)
        redis = EmbeddedRedis(workdir / "redis", port=0, appendfsync="always")
        redis.start()
        assert redis.pid is not None
        store = QueueStore.from_url(redis.url, QUEUE)
        try:
            with push_daemon(workdir, redis.url) as (port, daemon_pid):
                start = 0
                for round_ in range(repeat):
                    for window in windows:
                        for feeders in feeder_counts:
                            count = cell_records(counts, window, feeders)
                            cell = await measure(port, (daemon_pid, redis.pid), window, feeders, start, count)
                            cells[window, feeders].append(cell)
                            start += count
                            await store.clear()  # every cell starts from an empty queue
                            print(f"  round {round_ + 1}: window {window:>6,} x {feeders} feeder(s): "
                                  f"{cell.rate:>10,.0f} records/s", file=sys.stderr)
                    if 1 not in windows:
                        continue
                    # The ceiling right after the cells it bounds: this VM's speed drifts within the hour.
                    for feeders in feeder_counts:
                        ceiling = fsynced_round_trips(redis.url, cell_records(counts, 1, feeders), feeders)
                        if ceiling is not None:
                            ceilings[feeders].append(ceiling)
                            ratios[feeders].append(cells[1, feeders][-1].rate / ceiling.rate)
        finally:
            await store.close()
            redis.stop()
    print(f"\npush throughput, records/s: median (best) of {repeat} rounds; {'quick' if quick else 'full'} run, "
          "records per cell: " + ", ".join(f"window {w:,}: {n:,}" for w, n in counts.items() if w in windows)
          + " (x feeders at window 1)")
    print(f"machine: {machine()}; load average before the run: {LOAD_BEFORE}")
    print("measured: unique records fed over loopback TCP to `dataq push` (a subprocess) -> Redis (AOF, fsync always),")
    print("          from the first line sent to the last reply received; every reply checked to be Pushed\n")
    cpu_title = "CPU µs/record (1st column): daemon / redis / feeders"
    print(f"| {'window':>8} | " + " | ".join(f"{f} feeder{'s' if f > 1 else ''}".rjust(19) for f in feeder_counts)
          + f" | {cpu_title} |")
    print(f"|{'-' * 10}|" + "|".join("-" * 21 for _ in feeder_counts) + f"|{'-' * (len(cpu_title) + 2)}|")
    for window in windows:
        row = []
        for feeders in feeder_counts:
            rates = sorted(cell.rate for cell in cells[window, feeders])
            row.append(f"{statistics.median(rates):>9,.0f} ({rates[-1]:>7,.0f})")
        first = cells[window, feeder_counts[0]]
        cpu = [statistics.median(cell.cpu[i] for cell in first) for i in range(3)]
        costs = f"{cpu[0]:.1f} / {cpu[1]:.1f} / {cpu[2]:.1f}"
        print(f"| {window:>8,} | " + " | ".join(row) + f" | {costs:>{len(cpu_title)}} |")
    if 1 not in windows:
        return
    if not any(ceilings.values()):
        print("\nceiling for window 1 not measured: redis-benchmark (Debian's redis-tools) not found")
        return
    print("\nwindow 1 (each feeder waits for each reply) against its ceiling, redis-benchmark with as many")
    print("connections, one SET at a time each, same server (fsync always), measured right after each round's cells:")
    for feeders in feeder_counts:
        measured, ratio = sorted(c.rate for c in ceilings[feeders]), sorted(ratios[feeders])
        print(f"  {feeders:>2} feeder(s): ceiling {statistics.median(measured):,.0f} ({measured[-1]:,.0f}) writes/s; "
              f"dataq / ceiling per round: {', '.join(f'{r:.2f}' for r in ratios[feeders])} "
              f"(median {statistics.median(ratio):.2f})")
    exchange = statistics.median(c.client_cpu for c in ceilings[feeder_counts[0]])
    print(f"the socket work of one request-reply exchange, in C (redis-benchmark's own CPU per request, "
          f"{feeder_counts[0]} connection(s)): {exchange:.1f} µs; the push daemon makes two per record (its "
          f"feeder's and Redis's): {2 * exchange:.1f} µs before any work of its own")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer records per cell")
    parser.add_argument("--repeat", type=int, default=3, help="rounds over every cell (default 3)")
    parser.add_argument("--windows", type=int, nargs="+", default=WINDOWS, help="windows to measure")
    parser.add_argument("--feeders", type=int, nargs="+", default=FEEDERS, help="feeder counts to measure")
    args = parser.parse_args()
    # The loop `dataq feed` runs its Feeder on (uvloop when installed), so the feeders cost what they cost there.
    run_daemon(run(args.quick, args.repeat, tuple(args.windows), tuple(args.feeders)))


if __name__ == "__main__":
    main()
