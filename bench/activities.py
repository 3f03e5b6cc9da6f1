"""Activities: what choosing between them costs the pop daemon, and what they buy the records that matter.

Two measurements, each in interleaved rounds against the same daemon without activities, on a private
redis-server (embedded, ``appendfsync always``):

- **Rate**: one ``dataq pop`` (a subprocess, concurrency 256, action ``noop``) drains a queue pre-filled with
  ``--records`` records. With four activities (``express`` strict, ``science`` share 3, ``default`` and
  ``backfill`` share 1) the records are spread over all four; without, they are all ``default``'s. The clock
  starts when the ``action`` flag goes on and stops when the ``done`` counter reaches the count. Goal: the rate with
  four activities at least 0.9 of the rate with one.
- **Latency**: the daemon at concurrency 16 with action ``sleep:0.005`` (about 3,000 records/s) drains a backlog
  of ``--backlog`` records; meanwhile 100 records of ``express`` (matched by their path) are pushed, one every
  20 ms. Each one's latency is the time from
  its push to its done, as the queue remembers it (``remember_done``). Without activities the same 100 records
  wait behind the backlog.

Run it: ``.venv/bin/python bench/activities.py [--quick] [--records N] [--backlog N] [--rounds N]``
(``--quick``: 20,000 records, a backlog of 10,000, 1 round).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pop import cpu_seconds, drained, pop_daemons
from dataq.activities import Activity, Plan
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.record import Record
from dataq.store import Flag, QueueStore
from dataq.store.remembered import Done

QUEUE = "bench"
DEFAULT_RECORDS = 100_000
DEFAULT_BACKLOG = 100_000
EXPRESS = 100
EXPRESS_EVERY = 0.02
PUSH_CHUNK = 1000
CONCURRENCY = 256
LATENCY_CONCURRENCY = 16
LATENCY_ACTION = "sleep:0.005"
PLAN = Plan((Activity("express", 0, ("*/calib/*",)), Activity("science", 3, ("*.fits",)), Activity("default"),
             Activity("backfill", 1)))
ACTIVITIES = """
[queues.bench.activities.express]
match = ["*/calib/*"]
strict = true
[queues.bench.activities.science]
match = ["*.fits"]
share = 3
[queues.bench.activities.backfill]
share = 1
"""


def write_config(directory: Path, url: str, name: str, action: str, activities: bool) -> Path:
    path = directory / f"{name}.toml"
    path.write_text(
        f'data_dir = "{directory}"\n[redis]\nurl = "{url}"\n[log]\ndir = "{directory / "log"}"\nlevel = "warning"\n'
        f'format = "json"\n[metrics]\nenabled = false\n[queues.{QUEUE}]\nactions = ["{action}"]\n'
        + (ACTIVITIES if activities else ""), encoding="utf-8")
    return path


def spread(count: int, start: int = 0) -> list[Record]:
    """Records over the four activities: a tenth express, then science, default and backfill by turns."""
    found = []
    for n in range(start, start + count):
        kind = n % 10
        if kind == 0:
            found.append(Record(f"/data/calib/flat_{n:07d}.fits", f"{n:032x}", n))
        elif kind % 3 == 1:
            found.append(Record(f"/data/sci/obj_{n:07d}.fits", f"{n:032x}", n))
        elif kind % 3 == 2:
            found.append(Record(f"/data/misc/log_{n:07d}.txt", f"{n:032x}", n))
        else:
            found.append(Record(f"/data/old/obj_{n:07d}.hdr", f"{n:032x}", n, activity="backfill"))
    return found


async def fill(store: QueueStore, batch: list[Record]) -> None:
    for start in range(0, len(batch), PUSH_CHUNK):
        await store.push_batch(batch[start:start + PUSH_CHUNK], source="bench")


async def rate(store: QueueStore, config: Path, count: int, redis_pid: int) -> tuple[float, float, float]:
    """Records/s draining ``count`` pre-filled records, and the daemon's and redis-server's CPU µs per record."""
    await store.client.flushall()
    await fill(store, spread(count))
    await store.set_flag(Flag.ACTION, False)
    async with pop_daemons(store, config, "rate", 1, CONCURRENCY) as pids:
        before = cpu_seconds(pids[0]), cpu_seconds(redis_pid)
        started = time.perf_counter()
        await store.set_flag(Flag.ACTION, True)
        await drained(store, count)
        elapsed = time.perf_counter() - started
        daemon_cpu = (cpu_seconds(pids[0]) - before[0]) / count * 1e6
        redis_cpu = (cpu_seconds(redis_pid) - before[1]) / count * 1e6
    assert (await store.summary()).tracked == 0
    return count / elapsed, daemon_cpu, redis_cpu


async def latency(store: QueueStore, config: Path, backlog: int) -> list[float]:
    """Seconds from push to done of :data:`EXPRESS` records pushed one by one while ``backlog`` records drain."""
    await store.client.flushall()
    old = [Record(f"/data/old/obj_{n:07d}.hdr", f"{n + 10_000_000:032x}", n) for n in range(backlog)]
    await fill(store, [replace(r, activity="backfill") for r in old] if store.plan.named else old)
    express = [Record(f"/data/calib/bias_{n:04d}.fits", f"{n + 50_000_000:032x}", n) for n in range(EXPRESS)]
    async with pop_daemons(store, config, "latency", 1, LATENCY_CONCURRENCY):
        for record in express:
            await store.push_batch([record], source="bench")
            await asyncio.sleep(EXPRESS_EVERY)

        async def all_done() -> bool:
            known = await store.whereabouts([r.checksum for r in express], max_errors=0)
            return all(isinstance(k, Done) for k in known)

        deadline = time.monotonic() + 1800
        while not await all_done():
            if time.monotonic() > deadline:
                raise SystemExit("the express records were not done in 30 minutes")
            await asyncio.sleep(0.1)
        known = await store.whereabouts([r.checksum for r in express], max_errors=0)
    return [k.done_at - k.pushed_at for k in known if isinstance(k, Done)]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 records, a backlog of 10,000, 1 round")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--backlog", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    count = args.records or (20_000 if args.quick else DEFAULT_RECORDS)
    backlog = args.backlog or (10_000 if args.quick else DEFAULT_BACKLOG)
    rounds = args.rounds or (1 if args.quick else 3)
    load_before = os.getloadavg()[0]
    rates: dict[str, list[tuple[float, float, float]]] = {"one": [], "four": []}
    waits: dict[str, list[float]] = {"one": [], "four": []}
    with tempfile.TemporaryDirectory(prefix="dataq-bench-") as temp:
        directory = Path(temp)
        with EmbeddedRedis(directory / "redis", port=0, appendfsync="always") as server:
            assert server.pid is not None
            stores = {"one": QueueStore.from_url(server.url, QUEUE),
                      "four": QueueStore.from_url(server.url, QUEUE, plan=PLAN)}
            try:
                version = (await stores["one"].client.info("server"))["redis_version"]
                for round_ in range(rounds):
                    for name in ("one", "four") if round_ % 2 == 0 else ("four", "one"):
                        config = write_config(directory, server.url, f"{name}-noop", "noop", name == "four")
                        rates[name].append(await rate(stores[name], config, count, server.pid))
                    ratio = rates["four"][-1][0] / rates["one"][-1][0]
                    print(f"round {round_ + 1}: rate one activity {rates['one'][-1][0]:,.0f}/s, four "
                          f"{rates['four'][-1][0]:,.0f}/s: ratio {ratio:.3f}", flush=True)
                for round_ in range(rounds):
                    for name in ("four", "one") if round_ % 2 == 0 else ("one", "four"):
                        config = write_config(directory, server.url, f"{name}-sleep", LATENCY_ACTION,
                                              name == "four")
                        waits[name] += await latency(stores[name], config, backlog)
                    print(f"round {round_ + 1}: express p50 with activities {quantile(waits['four'], 0.5):.3f} s, "
                          f"without {quantile(waits['one'], 0.5):.3f} s", flush=True)
            finally:
                for store in stores.values():
                    await store.close()
    print()
    print(f"activities benchmark: redis {version} appendfsync always, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print()
    ratios = [four[0] / one[0] for one, four in zip(rates["one"], rates["four"], strict=True)]
    print(f"| pop daemon, {count:,} records, concurrency {CONCURRENCY}, noop | records/s (median of {rounds}) "
          "| CPU µs/record: daemon / redis |")
    print("| --- | ---: | ---: |")
    for name, label in (("one", "one activity"), ("four", "four activities")):
        runs = rates[name]
        print(f"| {label} | {statistics.median(r for r, _, _ in runs):,.0f} | "
              f"{statistics.median(d for _, d, _ in runs):.1f} / {statistics.median(c for _, _, c in runs):.1f} |")
    print(f"| **ratio** (median of the rounds' ratios; goal >= 0.9) | **{statistics.median(ratios):.3f}** | |")
    print()
    print(f"| {EXPRESS} express records under a backlog of {backlog:,} ({LATENCY_ACTION}, concurrency "
          f"{LATENCY_CONCURRENCY}) | p50 s | p99 s |")
    print("| --- | ---: | ---: |")
    for name, label in (("four", "with activities (express strict)"), ("one", "without activities")):
        print(f"| {label} | {quantile(waits[name], 0.5):.3f} | {quantile(waits[name], 0.99):.3f} |")
    print()
    print("rerun: .venv/bin/python bench/activities.py [--quick] [--records N] [--backlog N] [--rounds N]")


if __name__ == "__main__":
    asyncio.run(main())
