"""Pop daemon throughput: records/s through ``dataq pop`` with a no-op action, from a pre-filled queue.

What is measured: a private redis-server (embedded, ``appendfsync always``, in a temporary directory) holds a
queue pre-filled with ``--records`` records (100,000 by default). One or two pop daemons run as subprocesses
(``dataq pop --config ... --concurrency N``, action ``noop``, log level warning so no per-record log line is
written) with the ``action`` flag off until every daemon is registered and subscribed; the clock starts when
the flag goes on and stops when the queue's ``done`` counter reaches the record count (polled every 5 ms).
Each record costs a claim (batched: as many as there are free slots per call), its action, and an
acknowledgement (batched: everything finished since the last call), each a Lua script fsynced by Redis. The
table also gives the CPU time per record of the daemons together and of redis-server over the timed interval.

Run it: ``.venv/bin/python bench/pop.py [--quick] [--records N]`` (``--quick``: 10,000 records).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from dataq.embedded.redis_server import EmbeddedRedis
from dataq.record import Record
from dataq.store import Flag, QueueStore

QUEUE = "bench"
DEFAULT_RECORDS = 100_000
QUICK_RECORDS = 10_000
PUSH_CHUNK = 1000
POLL = 0.005
STARTUP_TIMEOUT = 30.0
RUN_TIMEOUT = 600.0
SCENARIOS = (("1 daemon, concurrency 1", 1, 1), ("1 daemon, concurrency 16", 1, 16),
             ("1 daemon, concurrency 64", 1, 64), ("1 daemon, concurrency 256", 1, 256),
             ("2 daemons, concurrency 64 each", 2, 64))


@dataclass(frozen=True)
class Result:
    label: str
    records: int
    seconds: float
    daemon_cpu_us: float
    """CPU µs per record of all pop daemons together, over the timed interval."""
    redis_cpu_us: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def write_config(directory: Path, url: str) -> Path:
    path = directory / "bench.toml"
    path.write_text(
        f'data_dir = "{directory}"\n[redis]\nurl = "{url}"\n[log]\ndir = "{directory / "log"}"\nlevel = "warning"\n'
        f'format = "json"\n[metrics]\nenabled = false\n[queues.{QUEUE}]\nactions = ["noop"]\n',
        encoding="utf-8",
    )
    return path


def records(count: int) -> list[Record]:
    return [Record(path=f"/data/bench/file_{n:07d}.fits", checksum=f"{n:032x}", size=n) for n in range(count)]


async def fill(store: QueueStore, count: int) -> None:
    await store.client.flushall()
    batch = records(count)
    for start in range(0, count, PUSH_CHUNK):
        await store.push_batch(batch[start : start + PUSH_CHUNK], source="bench")
    await store.set_flag(Flag.ACTION, False)


async def wait_for(condition: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(POLL)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_scenario(store: QueueStore, config: Path, redis_pid: int, label: str, daemons: int,
                       concurrency: int, count: int) -> Result:
    await fill(store, count)
    command = [sys.executable, "-c", "from dataq.cli.main import main; main()", "pop", "--config", str(config),
               "--concurrency", str(concurrency)]
    children = [await asyncio.create_subprocess_exec(*command, stdout=subprocess.DEVNULL) for _ in range(daemons)]
    try:
        async def up() -> bool:
            if any(child.returncode is not None for child in children):
                raise SystemExit(f"a pop daemon exited early ({label})")
            ((_, listening),) = await store.r.pubsub_numsub(store.keys.notices)
            return len(await store.workers()) == daemons and listening == daemons

        await wait_for(up, STARTUP_TIMEOUT, "the daemons to start")
        pids = [child.pid for child in children]
        cpu_before = (sum(map(cpu_seconds, pids)), cpu_seconds(redis_pid))
        started = time.perf_counter()
        await store.set_flag(Flag.ACTION, True)

        async def drained() -> bool:
            return (await store.counters()).get("done", 0) >= count

        await wait_for(drained, RUN_TIMEOUT, "the queue to drain")
        elapsed = time.perf_counter() - started
        cpu_after = (sum(map(cpu_seconds, pids)), cpu_seconds(redis_pid))
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        for child in children:
            await asyncio.wait_for(child.wait(), 30)
    summary = await store.summary()
    assert summary.tracked == 0 and summary.counters.get("done") == count, summary
    daemon_cpu, redis_cpu = ((after - before) / count * 1e6
                             for before, after in zip(cpu_before, cpu_after, strict=True))
    return Result(label, count, elapsed, daemon_cpu, redis_cpu)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_RECORDS:,} records instead of {DEFAULT_RECORDS:,}")
    parser.add_argument("--records", type=int, default=None, help="records per scenario")
    args = parser.parse_args()
    count = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="dataq-bench-") as temp:
        directory = Path(temp)
        with EmbeddedRedis(directory / "redis", port=0, appendfsync="always") as server:
            config = write_config(directory, server.url)
            store = QueueStore.from_url(server.url, QUEUE)
            try:
                version = (await store.client.info("server"))["redis_version"]
                assert server.pid is not None
                results = [await run_scenario(store, config, server.pid, label, daemons, concurrency, count)
                           for label, daemons, concurrency in SCENARIOS]
            finally:
                await store.close()
    print(f"dataq pop benchmark: {count:,} records per run, action noop, redis {version} appendfsync always,")
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; daemons are subprocesses;")
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (other work on the host skews it)")
    print()
    cpu_title = "CPU µs/record: daemons / redis"
    print(f"| {'scenario':<32} | {'records':>9} | {'seconds':>8} | {'records/s':>10} | {cpu_title} |")
    print(f"| {'-' * 32} | {'-' * 9}:| {'-' * 8}:| {'-' * 10}:| {'-' * len(cpu_title)}:|")
    for result in results:
        costs = f"{result.daemon_cpu_us:.1f} / {result.redis_cpu_us:.1f}"
        print(f"| {result.label:<32} | {result.records:>9,} | {result.seconds:>8.2f} | {result.rate:>10,.0f} "
              f"| {costs:>{len(cpu_title)}} |")
    print()
    print("rerun: .venv/bin/python bench/pop.py [--quick] [--records N]")


if __name__ == "__main__":
    asyncio.run(main())
