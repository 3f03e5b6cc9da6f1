"""What ``dataq-cli --summary`` costs on a busy queue: wall time, and the slowest command Redis ran for it.

Starts a private redis-server in a temporary directory, pushes ``--records`` records (10^6) through the store's
own scripts (``push_batch`` by 1,000, then ``claim`` and ``ack`` by 1,000 as a pop daemon would), so that the
queue has pushed and processed them all within the last minute, then:

* runs ``dataq-cli --summary --json`` as a subprocess ``--runs`` times (5): wall time of each, from the
  process's start to its exit (Python's start and imports included), and the rates it printed;
* with ``slowlog-log-slower-than 1000`` set and the slow log reset before the runs, lists every command of
  1 ms or more that Redis ran meanwhile (the target: none);
* for comparison, in the same run, times the way ``--summary`` counted before the rates ring: reading the
  window's events from the stream by ``XRANGE ... COUNT 10000`` pages (the stream holds only its capped tail).

Rerun: ``.venv/bin/python bench/summary.py`` (``--records 100000`` for a quick run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dataq.embedded.redis_server import EmbeddedRedis
from dataq.record import Record
from dataq.store import QueueStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.push import lines, machine

QUEUE = "transfer"
WORKER = "bench-host:1:pop:summary"
BATCH = 1_000
SLOW_MICROSECONDS = 1_000
OLD_PAGE = 10_000
"""Events per XRANGE page of the old stream-reading rates (``RATE_CHUNK`` before the rates ring)."""


async def fill(store: QueueStore, records: int) -> float:
    """Push and process ``records`` records in batches; the seconds it took."""
    began = time.perf_counter()
    await store.heartbeat(WORKER, {"role": "pop", "host": "bench-host", "pid": 1}, {}, ttl=600)
    for start in range(0, records, BATCH):
        count = min(BATCH, records - start)
        fields = (line.decode().split() for line in lines(start, count))
        await store.push_batch([Record(path, checksum, int(size)) for path, checksum, size in fields], "bench")
        claim = await store.claim(WORKER, count)
        await store.ack(WORKER, [(record.id, "0.001") for record in claim.records])
    return time.perf_counter() - began


async def old_stream_count(store: QueueStore) -> tuple[float, int, int]:
    """The pre-ring way: page through the last minute's events. Seconds, events read, pages."""
    began = time.perf_counter()
    start = f"{int((time.time() - 60) * 1000)}-0"
    read = pages = 0
    while True:
        page = await store.r.xrange(store.keys.events, start, "+", count=OLD_PAGE)
        pages += 1
        read += len(page)
        if len(page) < OLD_PAGE:
            break
        last = page[-1][0]
        millis, sequence = last.split("-")
        start = f"{millis}-{int(sequence) + 1}"
    return time.perf_counter() - began, read, pages


def run_summary(config: Path) -> tuple[float, dict[str, object]]:
    began = time.perf_counter()
    result = subprocess.run([*cli_command(), "--config", str(config), "--queue", QUEUE, "--summary", "--json"],
                            check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"dataq-cli --summary failed ({result.returncode}): {result.stderr}")
    elapsed = time.perf_counter() - began
    for line in result.stdout.splitlines():
        document = json.loads(line)
        if document.get("switch") == "summary":
            return elapsed, document
    raise SystemExit(f"no summary in dataq-cli's output: {result.stdout!r}")


def cli_command() -> list[str]:
    script = shutil.which("dataq-cli", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-c", "from dataq.cli.console import main; main()"]


async def run(records: int, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dataq-bench-") as tmp:
        workdir = Path(tmp)
        redis = EmbeddedRedis(workdir / "redis", port=0, appendfsync="everysec")
        redis.start()
        store = QueueStore.from_url(redis.url, QUEUE)
        config = workdir / "dataq.toml"
        config.write_text(f'data_dir = "{workdir}"\n[redis]\nurl = "{redis.url}"\n'
                          f'[queues.{QUEUE}]\n')
        try:
            filled = await fill(store, records)
            print(f"filled: {records:,} records pushed, claimed and acknowledged in {filled:.1f} s", file=sys.stderr)
            await store.r.config_set("slowlog-log-slower-than", SLOW_MICROSECONDS)
            await store.r.slowlog_reset()
            walls, summaries = [], []
            for _ in range(runs):
                wall, summary = await asyncio.to_thread(run_summary, config)
                walls.append(wall)
                summaries.append(summary)
            slow = [entry for entry in await store.r.slowlog_get(128)
                    if not str(entry.get("command", "")).upper().startswith(("SLOWLOG", "CONFIG"))]
            old_seconds, old_events, old_pages = await old_stream_count(store)
            startup = [await asyncio.to_thread(_wall, [*cli_command(), "--help"]) for _ in range(runs)]
        finally:
            await store.close()
            redis.stop()
    rates = summaries[-1]["rates"]
    assert isinstance(rates, dict)
    print(f"dataq-cli --summary on a queue that pushed and processed {records:,} records within the last "
          f"{filled:.1f} s; machine: {machine()}; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| measure | value |\n| --- | ---: |")
    print(f"| wall time of `dataq-cli --summary --json`, median (max) of {runs} | "
          f"{statistics.median(walls):.3f} s ({max(walls):.3f} s) |")
    print(f"| wall time of `dataq-cli --help` (Python's start and imports), median | "
          f"{statistics.median(startup):.3f} s |")
    print(f"| Redis commands of {SLOW_MICROSECONDS} µs or more during the runs (SLOWLOG) | {len(slow)} |")
    print(f"| rates printed (per minute): pushed / done, over | {rates['pushed_per_minute']:,.0f} / "
          f"{rates['done_per_minute']:,.0f}, {rates['covered_seconds']:.0f} s |")
    print(f"| before the ring: reading the window's events from the stream | {old_seconds:.3f} s, "
          f"{old_events:,} events in {old_pages} XRANGE pages |")
    for entry in slow:
        print(f"  slow: {entry.get('duration')} µs {entry.get('command')!r}")


def _wall(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run(args.records, args.runs))


if __name__ == "__main__":
    main()
