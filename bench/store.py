"""Benchmark of the queue store alone (no daemons): push throughput, memory per record, range commands.

What it measures, against a private redis-server (AOF on, ``appendfsync always``, no RDB) that it starts in a
temporary directory:

* ``push_batch`` records/s at batch sizes 1, 100, 1,000 and 10,000 (one client, awaiting each batch), and at
  1,000 with two batches at Redis at once, as the push daemon's group commit keeps them: ``--rounds`` (3)
  measurements of each, rounds interleaved, each round from an empty store; the median is shown, then every
  round;
* Redis memory per queued record once 10^6 records shaped like the seed's test data are queued
  (~75-character path, 32-hex checksum, size), with the event stream at its default cap and without events;
* milliseconds to advance and to deactivate a 1,000-id range in the middle of a 10^6-record active queue.

Rerun: ``.venv/bin/python bench/store.py`` (``--quick`` for a smaller run; ``--records N`` to change 10^6).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import statistics
import tempfile
import time

from dataq.embedded.redis_server import EmbeddedRedis
from dataq.record import Record
from dataq.store import QueueList, QueueStore
from dataq.store.base import DEFAULT_EVENTS_MAX_LEN


def seed_like(n: int) -> Record:
    """A record shaped like the 2014 data-q's test data (path of ~75 characters)."""
    return Record(
        path=f"/noao-tuc-z1/mtn/20140708/ct15m/smarts/c15e_140708_{n % 1_000_000:06d}_{n // 1_000_000:02d}_ori.fits.fz",
        checksum=hashlib.md5(n.to_bytes(8, "little")).hexdigest(),
        size=9922 + n % 100_000,
    )


async def push_rate(store: QueueStore, batch: int, total: int, offset: int, in_flight: int = 1) -> float:
    """Records/s of ``push_batch`` calls, ``in_flight`` of them at Redis at once (the push daemon keeps two)."""
    records = [seed_like(offset + i) for i in range(total)]
    starts = iter(range(0, total, batch))

    async def lane() -> None:
        for i in starts:
            await store.push_batch(records[i : i + batch], source="bench")

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return total / (time.perf_counter() - start)


async def used_memory(store: QueueStore) -> int:
    info = await store.r.info("memory")
    return int(info["used_memory"])


async def fill(store: QueueStore, count: int) -> None:
    for start in range(0, count, 10_000):
        await store.push_batch([seed_like(n) for n in range(start, min(count, start + 10_000))], source="bench")


async def memory_per_record(url: str, count: int, events_max_len: int) -> float:
    store = QueueStore.from_url(url, "mem", events_max_len=events_max_len)
    try:
        await store.r.flushall()
        before = await used_memory(store)
        await fill(store, count)
        return (await used_memory(store) - before) / count
    finally:
        await store.close()


async def range_ms(store: QueueStore, count: int) -> tuple[float, float]:
    ids = [r.checksum for r in await store.list_records(QueueList.ACTIVE, offset=count // 2, limit=2000)]
    start = time.perf_counter()
    moved = await store.advance(ids[0], ids[999])
    advance = (time.perf_counter() - start) * 1000
    assert moved == 1000
    start = time.perf_counter()
    moved = await store.deactivate(ids[1000], ids[1999])
    deactivate = (time.perf_counter() - start) * 1000
    assert moved == 1000
    return advance, deactivate


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="dataq-bench-") as tmp, EmbeddedRedis(tmp, port=0) as server:
        store = QueueStore.from_url(server.url, "bench")
        rows: list[tuple[str, str]] = []
        offset = 10_000_000
        cases = [(batch, 1) for batch in (1, 100, 1000, 10_000)]
        cases.insert(3, (1000, 2))
        rates: dict[tuple[int, int], list[float]] = {case: [] for case in cases}
        for _ in range(args.rounds):  # rounds interleaved, so a slow spell of the host spreads over all cases
            # Each round from an empty store: it ends with 800,000 records queued, within the default
            # max_queue_size (1,000,000), as a live queue would be.
            await store.r.flushall()
            for batch, in_flight in cases:
                total = min(args.push_total, max(2_000, batch * 20)) if batch == 1 else args.push_total
                rates[batch, in_flight].append(await push_rate(store, batch, total, offset, in_flight=in_flight))
                offset += total
        for (batch, in_flight), measured in rates.items():
            total = min(args.push_total, max(2_000, batch * 20)) if batch == 1 else args.push_total
            name = (f"push_batch, batch {batch:,}, 2 batches in flight as the push daemon keeps them"
                    if in_flight == 2 else f"push_batch, batch {batch:,} ({total:,} records)")
            rows.append((name, f"{statistics.median(measured):,.0f} records/s (rounds: "
                               + " / ".join(f"{rate:,.0f}" for rate in measured) + ")"))
        await store.r.flushall()
        await store.close()

        with_events = await memory_per_record(server.url, args.records, DEFAULT_EVENTS_MAX_LEN)
        rows.append(
            (f"Redis memory per queued record, {args.records:,} records, events capped", f"{with_events:.0f} B")
        )
        without = await memory_per_record(server.url, args.records, 0)
        rows.append((f"Redis memory per queued record, {args.records:,} records, no events", f"{without:.0f} B"))

        store = QueueStore.from_url(server.url, "mem", events_max_len=0)
        advance, deactivate = await range_ms(store, args.records)
        rows.append((f"advance 1,000-id range mid-queue of {args.records:,}", f"{advance:.1f} ms"))
        rows.append((f"deactivate 1,000-id range mid-queue of {args.records:,}", f"{deactivate:.1f} ms"))
        await store.close()

    width = max(len(name) for name, _ in rows)
    print(f"dataq store benchmark — {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print("redis-server with appendonly yes, appendfsync always, one client on loopback TCP\n")
    print(f"{'measurement'.ljust(width)}  result")
    print(f"{'-' * width}  ------")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records for the memory and range tests")
    parser.add_argument("--push-total", type=int, default=200_000, help="records pushed per batch size")
    parser.add_argument("--rounds", type=int, default=3, help="push measurements per case; the median is shown")
    parser.add_argument("--quick", action="store_true", help="100,000 records, 50,000 pushes")
    parsed = parser.parse_args()
    if parsed.quick:
        parsed.records, parsed.push_total = 100_000, 50_000
    asyncio.run(main(parsed))
