"""What the web console's pages cost on a busy queue: wall time of each view with 10^6 records queued, and the
slowest command Redis ran for them.

Starts a private redis-server (fsync every second) in a temporary directory and pushes ``--records`` records
(10^6) through the store's own script by 1,000, leaving them queued (the names index at its default size holds the
newest of them); a pop daemon's heartbeat, a thousand records processed and a few gone inactive make the other
views non-empty. Then the console runs in this process (aiohttp, as ``dataq web`` serves it), and each view is
fetched ``--runs`` times (20), the views interleaved: the overview page and its JSON, a queue's page, a search by
file name, by a glob with a literal start and by one that starts with a wildcard, a record's page, and plots. With
``slowlog-log-slower-than 1000`` set and the slow log reset before the runs, every command of 1 ms or more that
Redis ran meanwhile is listed (the target: none).

Rerun: ``.venv/bin/python bench/console.py`` (``--records 100000`` for a quick run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from dataq.config import load_settings
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.record import Record
from dataq.store import QueueStore
from dataq.web.console import Console
from dataq.web.server import make_app

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.push import machine

QUEUE = "transfer"
WORKER = "bench-host:1:pop:console"
BATCH = 1_000
SLOW_MICROSECONDS = 1_000
TARGET_SECONDS = 0.3


def record(n: int) -> Record:
    return Record(f"/data/2026-11-{28 + n % 2}/decam/obs_{n:08d}.fits", f"{n:032x}", 20_000 + n % 977)


async def fill(store: QueueStore, records: int) -> float:
    began = time.perf_counter()
    await store.heartbeat(WORKER, {"role": "pop", "host": "bench-host", "pid": 1}, {}, ttl=3600)
    for start in range(0, records, BATCH):
        await store.push_batch([record(n) for n in range(start, min(records, start + BATCH))], "bench")
    claim = await store.claim(WORKER, BATCH)
    await store.ack(WORKER, [(item.id, "0.001") for item in claim.records[:-5]])
    await store.fail(WORKER, [(item.id, "rsync: connection refused") for item in claim.records[-5:]], max_errors=0)
    return time.perf_counter() - began


async def run(records: int, runs: int) -> None:
    newest = records - 1
    views = {
        "overview page": "/",
        "overview JSON": "/api/queues",
        "queue page": f"/queues/{QUEUE}",
        "search by name": f"/api/search?q=obs_{newest:08d}.fits",
        "search by glob obs_0099999*": f"/api/search?q=obs_{newest // 10:07d}*",
        "search by glob *7.fits": "/api/search?q=*7.fits",
        "record page": f"/records/{record(newest).checksum}?queue={QUEUE}",
        "plot of records, last hour": f"/queues/{QUEUE}/plot.svg?view=files&span=hour",
        "plot of bytes, last day": f"/queues/{QUEUE}/plot.svg?view=bytes&span=day",
        "plot of the next record's wait, last day": f"/queues/{QUEUE}/plot.svg?view=age&span=day",
    }
    with tempfile.TemporaryDirectory(prefix="dataq-bench-") as tmp:
        workdir = Path(tmp)
        redis = EmbeddedRedis(workdir / "redis", port=0, appendfsync="everysec")
        redis.start()
        config = workdir / "dataq.toml"
        config.write_text(f'data_dir = "{workdir}"\n[redis]\nurl = "{redis.url}"\n[queues.{QUEUE}]\n')
        settings = load_settings(config, environ={})
        store = QueueStore.open(settings, redis.url, QUEUE)
        client = TestClient(TestServer(make_app(Console(settings, {QUEUE: store}), "")))
        walls: dict[str, list[float]] = {view: [] for view in views}
        try:
            filled = await fill(store, records)
            print(f"filled: {records:,} records pushed in {filled:.1f} s", file=sys.stderr)
            await client.start_server()
            for path in views.values():  # warm: templates compiled, scripts loaded
                assert (await client.get(path)).status == 200, path
            await store.r.config_set("slowlog-log-slower-than", SLOW_MICROSECONDS)
            await store.r.slowlog_reset()
            for _ in range(runs):
                for view, path in views.items():
                    began = time.perf_counter()
                    response = await client.get(path)
                    await response.read()
                    walls[view].append(time.perf_counter() - began)
                    assert response.status == 200, (path, response.status)
            slow = [entry for entry in await store.r.slowlog_get(128)
                    if not str(entry.get("command", "")).upper().startswith(("SLOWLOG", "CONFIG"))]
            summary = await store.summary()
        finally:
            await client.close()
            await store.close()
            redis.stop()
    print(f"the web console with {summary.active:,} records queued ({summary.inactive} inactive); "
          f"machine: {machine()}; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"| view | median | max of {runs} |\n| --- | ---: | ---: |")
    for view, times in walls.items():
        print(f"| {view} | {statistics.median(times) * 1000:.1f} ms | {max(times) * 1000:.1f} ms |")
    print(f"Redis commands of {SLOW_MICROSECONDS} µs or more during the runs (SLOWLOG): {len(slow)}")
    for entry in slow:
        print(f"  slow: {entry.get('duration')} µs {str(entry.get('command'))[:160]!r}")
    worst = max(statistics.median(times) for times in walls.values())
    print(f"slowest view's median {worst * 1000:.1f} ms against the target {TARGET_SECONDS * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(run(args.records, args.runs))


if __name__ == "__main__":
    main()
