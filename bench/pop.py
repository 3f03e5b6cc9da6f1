"""Pop daemon throughput: records/s through ``dataq pop`` with a no-op action, from a pre-filled queue.

What is measured: a private redis-server (embedded, ``appendfsync always``, in a temporary directory) holds a
queue pre-filled with ``--records`` records (100,000 by default). One or two pop daemons run as subprocesses
(``dataq pop --config ... --concurrency N``, action ``noop``, log level warning so no per-record log line is
written) with the ``action`` flag off until every daemon is registered and subscribed; the clock starts when
the flag goes on and stops when the queue's ``done`` counter reaches the record count (polled every 5 ms).
Each record costs a claim (batched: as many as there are free slots per call), its action, and an
acknowledgement (batched: everything finished since the last call), each a Lua script fsynced by Redis. The
table also gives the CPU time per record of the daemons together and of redis-server over the timed interval.

``--pipeline``: whether the pipeline runs at the speed of its slowest stage. One pop daemon (concurrency 256)
runs while the records are fed through ``dataq push`` by one feeder at window 1,000 (clock: first line sent to
last record done), against the same daemon draining the same number of pre-filled records, rounds interleaved;
each round prints the ratio.

Run it: ``.venv/bin/python bench/pop.py [--quick] [--records N] [--pipeline [--rounds N]]`` (``--quick``:
10,000 records).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.push import push_daemon
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.feed.client import Feeder
from dataq.record import Record
from dataq.store import Flag, QueueStore

QUEUE = "bench"
DEFAULT_RECORDS = 100_000
QUICK_RECORDS = 10_000
PUSH_CHUNK = 1000
POLL = 0.005
STARTUP_TIMEOUT = 30.0
RUN_TIMEOUT = 600.0
PIPELINE_WINDOW = 1_000
PIPELINE_CONCURRENCY = 256
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


@contextlib.asynccontextmanager
async def pop_daemons(store: QueueStore, config: Path, label: str, daemons: int,
                      concurrency: int) -> AsyncIterator[list[int]]:
    """``daemons`` x ``dataq pop`` (as subprocesses), registered and subscribed: yields their pids."""
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
        yield [child.pid for child in children]
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        for child in children:
            await asyncio.wait_for(child.wait(), 30)


async def drained(store: QueueStore, count: int) -> None:
    async def done() -> bool:
        return (await store.counters()).get("done", 0) >= count

    await wait_for(done, RUN_TIMEOUT, "the queue to drain")


async def run_scenario(store: QueueStore, config: Path, redis_pid: int, label: str, daemons: int,
                       concurrency: int, count: int) -> Result:
    """Drain a queue pre-filled with ``count`` records."""
    await fill(store, count)
    async with pop_daemons(store, config, label, daemons, concurrency) as pids:
        cpu_before = (sum(map(cpu_seconds, pids)), cpu_seconds(redis_pid))
        started = time.perf_counter()
        await store.set_flag(Flag.ACTION, True)
        await drained(store, count)
        elapsed = time.perf_counter() - started
        cpu_after = (sum(map(cpu_seconds, pids)), cpu_seconds(redis_pid))
    return await checked(store, label, count, elapsed, cpu_before, cpu_after)


async def run_pipeline(store: QueueStore, config: Path, redis: EmbeddedRedis, label: str, concurrency: int,
                       count: int) -> Result:
    """Feed ``count`` records through ``dataq push`` (one feeder, window :data:`PIPELINE_WINDOW`) while one pop
    daemon runs them: from the first line sent to the last record done."""
    await store.client.flushall()
    lines = [f"{r.path} {r.checksum} {r.size}\n".encode() for r in records(count)]
    assert redis.pid is not None
    async with pop_daemons(store, config, label, 1, concurrency) as pids:
        with push_daemon(config.parent / "push", redis.url, queue=QUEUE) as (port, _):
            feeder = Feeder("127.0.0.1", port, window=PIPELINE_WINDOW, keep_replies=False)
            cpu_before = (sum(map(cpu_seconds, pids)), cpu_seconds(redis.pid))
            started = time.perf_counter()
            feeding = asyncio.create_task(feeder.feed(lines))
            await drained(store, count)
            elapsed = time.perf_counter() - started
            cpu_after = (sum(map(cpu_seconds, pids)), cpu_seconds(redis.pid))
            if (await feeding).pushed != count:
                raise SystemExit(f"not every record came back Pushed ({label})")
    return await checked(store, label, count, elapsed, cpu_before, cpu_after)


async def checked(store: QueueStore, label: str, count: int, elapsed: float, cpu_before: tuple[float, float],
                  cpu_after: tuple[float, float]) -> Result:
    summary = await store.summary()
    assert summary.tracked == 0 and summary.counters.get("done") == count, summary
    daemon_cpu, redis_cpu = ((after - before) / count * 1e6
                             for before, after in zip(cpu_before, cpu_after, strict=True))
    return Result(label, count, elapsed, daemon_cpu, redis_cpu)


async def pipeline_rounds(store: QueueStore, config: Path, redis: EmbeddedRedis, count: int,
                          rounds: int) -> list[Result]:
    """Fed-while-running against pre-filled, same daemon settings, rounds interleaved; prints each round's ratio."""
    results = []
    for round_ in range(rounds):
        prefilled = await run_scenario(store, config, redis.pid or 0, f"pre-filled, concurrency {PIPELINE_CONCURRENCY}",
                                       1, PIPELINE_CONCURRENCY, count)
        fed = await run_pipeline(store, config, redis, f"fed at window {PIPELINE_WINDOW:,}, concurrency "
                                 f"{PIPELINE_CONCURRENCY}", PIPELINE_CONCURRENCY, count)
        print(f"round {round_ + 1}: pre-filled {prefilled.rate:,.0f} records/s, fed while running {fed.rate:,.0f} "
              f"records/s: ratio {fed.rate / prefilled.rate:.2f}")
        results += [prefilled, fed]
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_RECORDS:,} records instead of {DEFAULT_RECORDS:,}")
    parser.add_argument("--records", type=int, default=None, help="records per scenario")
    parser.add_argument("--pipeline", action="store_true",
                        help="only the pipeline: records fed through dataq push while one pop daemon runs them, "
                             "against the same daemon draining a pre-filled queue")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --pipeline (default 3)")
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
                if args.pipeline:
                    results = await pipeline_rounds(store, config, server, count, args.rounds)
                else:
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
    print("rerun: .venv/bin/python bench/pop.py [--quick] [--records N] [--pipeline [--rounds N]]")


if __name__ == "__main__":
    asyncio.run(main())
