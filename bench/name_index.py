"""What the names index costs the record path: pushes by 1,000 with ``search_names`` at its default against the same
pushes without an index, and the index's Redis memory per name.

Starts a private redis-server (fsync every second, as the embedded one runs), and two stores on it, queue
``named`` (``search_names`` = 100,000, the default) and queue ``plain`` (0), every other setting at its default.
Each round pushes ``--batches`` batches of 1,000 fresh records to each queue, the two interleaved and their order
swapped every round; a record's path is shaped like an instrument's (``/data/<night>/<camera>/obs_<n>.fits``).
Reported: records per second of each side (median of the rounds), their ratio, Redis's CPU per record of each side
(``INFO commandstats``: the push script's microseconds), and ``MEMORY USAGE`` of the full index divided by its
records.

Rerun: ``.venv/bin/python bench/name_index.py`` (``--rounds 5 --batches 100``).
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

from dataq.config.queue_settings import DEFAULT_SEARCH_NAMES
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.record import Record
from dataq.store import QueueStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.push import machine

BATCH = 1_000


def batch(queue: str, first: int) -> list[Record]:
    lead = "a" if queue == "named" else "b"
    return [Record(f"/data/2026-11-{28 + n % 2}/decam/obs_{n:08d}.fits", f"{lead}{n:031x}", 20_000 + n % 977)
            for n in range(first, first + BATCH)]


async def script_usec(store: QueueStore) -> tuple[float, int]:
    """Redis's total microseconds and calls of the scripts (EVALSHA) so far."""
    stats = await store.r.info("commandstats")
    entry = stats.get("cmdstat_evalsha", {})
    return float(entry.get("usec", 0)), int(entry.get("calls", 0))


async def run(rounds: int, batches: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dataq-bench-") as tmp:
        redis = EmbeddedRedis(Path(tmp) / "redis", port=0, appendfsync="everysec")
        redis.start()
        named = QueueStore.from_url(redis.url, "named", search_names=DEFAULT_SEARCH_NAMES)
        plain = QueueStore.from_url(redis.url, "plain", search_names=0)
        rates: dict[str, list[float]] = {"named": [], "plain": []}
        cpu: dict[str, list[float]] = {"named": [], "plain": []}
        sent = {"named": 0, "plain": 0}
        try:
            for round_ in range(rounds):
                sides = [("named", named), ("plain", plain)]
                for name, store in sides if round_ % 2 == 0 else reversed(sides):
                    await store.r.config_resetstat()  # type: ignore[attr-defined]
                    began = time.perf_counter()
                    for _ in range(batches):
                        await store.push_batch(batch(name, sent[name]), "bench")
                        sent[name] += BATCH
                    elapsed = time.perf_counter() - began
                    usec, _ = await script_usec(store)
                    rates[name].append(batches * BATCH / elapsed)
                    cpu[name].append(usec / (batches * BATCH))
            memory = 0
            names = 0
            for key in (named.keys.names, named.keys.names_before):
                usage = await named.r.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0")
                memory += int(usage or 0)
                names += int(await named.r.execute_command("LLEN", key)) // 2 * BATCH  # two elements a batch
        finally:
            await named.close()
            await plain.close()
            redis.stop()
    print(f"pushes by {BATCH:,}, {rounds} rounds of {batches * BATCH:,} records per side, interleaved; "
          f"machine: {machine()}; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| side | records/s (median) | Redis µs per record (median) |\n| --- | ---: | ---: |")
    for name, label in (("plain", "search_names = 0"), ("named", f"search_names = {DEFAULT_SEARCH_NAMES:,}")):
        print(f"| {label} | {statistics.median(rates[name]):,.0f} | {statistics.median(cpu[name]):.2f} |")
    ratio = statistics.median(n / p for n, p in zip(rates["named"], rates["plain"], strict=True))
    print(f"| ratio, with the index / without (median of the rounds' ratios) | {ratio:.2f} | "
          f"+{statistics.median(cpu['named']) - statistics.median(cpu['plain']):.2f} |")
    print(f"index: {names:,} names in {memory / 2**20:.1f} MiB, {memory / max(1, names):.0f} bytes per name "
          f"(paths of {len(batch('x', 0)[0].path)} characters)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(run(args.rounds, args.batches))


if __name__ == "__main__":
    main()
