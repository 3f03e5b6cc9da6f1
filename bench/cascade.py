"""Custody across sites: what end-to-end receipts cost (:mod:`testbed.cascade`; ``docs/custody.md``).

Three sites on this machine (mountain -> valley -> archive), each with its own redis-server (``appendfsync
always``), rsync daemon, ``dataq push`` and ``dataq pop`` (``--concurrency``). Measured, in one run:

* **rate**: ``--files`` small files fed at the mountain; the time from the first line sent until the archive has
  done them all, as records per second end to end, with custody (``remove_source = "after_receipt"``: records
  kept in custody, receipts asked for every ``receipt_interval``, sources deleted on the receipt) and without
  (``custody = false``, ``remove_source = true``: the one-hop hand-on of before), custody settings at their
  defaults (asked every 10 s). Rounds alternate which goes first; the table gives medians and the ratio (goal:
  custody keeps >= 0.9 of the rate). With custody, the time until the last receipt reached the mountain (every
  source deleted) is given too;
* **receipts query**: the Redis cost per id of answering receipts (``receipts.lua`` through the store, 1,000 ids
  per call, ids done and remembered), from the server's own ``INFO commandstats`` (microseconds in Redis per id)
  and the client's wall time per id;
* **memory per remembered id**: ``--ids`` records pushed, claimed and acknowledged through the store (as a pop
  daemon does), then ``MEMORY USAGE`` (exact: ``SAMPLES 0``) summed over the remembered-done keys, divided by the
  ids (goal: <= 64 bytes); and **per record in custody** (``--custody`` records kept as ``network_move`` keeps
  them).

* **against the plain tools' chain** (``--versus-rsync``): ``--files`` fed at the mountain with every setting at
  its default but what a cascade needs (``remove_source = "after_receipt"``, ``[pop] concurrency`` at its default
  unless ``--concurrency`` is given), from the first line fed to the archive's last done, against one bulk
  ``rsync -a --checksum`` mountain → valley then one valley → archive (no tracking, no custody), over the same
  links: on loopback, or with ``--link 75ms --mbit 400`` each hop through :mod:`testbed.link` (one-way delay, the
  handshake's round trip per connection, a bandwidth shared per direction). Rounds alternate which goes first;
  the ratio is the chain's time over dataq's (goal: >= 1.0).

Run it: ``.venv/bin/python bench/cascade.py [--files 2000] [--rounds 3] [--ids 1000000]``, or
``.venv/bin/python bench/cascade.py --versus-rsync --files 5000 --size 20000 [--link 75ms --mbit 400]``; ``--move
KEY=VALUE`` sets an option of every site's ``network_move`` (``--move max_batch_size=100``: batches that keep
their size, as before the transfer tuner)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cascade_profile
from bench.recently_deleted import journaled
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.feed.client import Feeder
from dataq.record import Record
from dataq.store import CustodyEntry, QueueStore
from testbed.cascade import Cascade
from testbed.link import link_process
from testbed.rsync import LOOPBACK, rsync_daemon
from testbed.waits import eventually

FLOW_TIMEOUT = 600.0
WORKER = "bench:1:pop:cascade"


def make_files(directory: Path, count: int, size: int) -> list[Record]:
    directory.mkdir(parents=True)
    records = []
    for n in range(count):
        data = n.to_bytes(8, "big") + os.urandom(size - 8)
        path = directory / f"f{n:06d}.fits"
        path.write_bytes(data)
        records.append(Record(str(path), hashlib.md5(data).hexdigest(), size))
    return records


async def counter(store: QueueStore, name: str) -> int:
    return (await store.summary()).counters.get(name, 0)


def cpu_seconds(root: Path, redis_ports: list[int]) -> dict[int, float]:
    """CPU seconds so far (their reaped children's included) of every process of a flow: those whose command line
    names ``root`` (daemons, rsync daemons; not the links' relays, which ``--profile`` shows apart) and the sites'
    redis-servers."""
    marks = [str(root), *(f"127.0.0.1:{port}" for port in redis_ports)]
    return {pid: seconds for pid, command, seconds in cascade_profile.processes()
            if any(mark in command for mark in marks)}


async def one_flow(root: Path, files: int, size: int, concurrency: int | None, custody: bool,
                   link: tuple[float, float | None] | None = None,
                   extra: dict[str, object] | None = None,
                   cpu: list[float] | None = None,
                   profile: list[str] | None = None) -> tuple[float, float | None]:
    """Seconds until the archive has done every record, and (with custody) until every source is deleted;
    ``extra``: more options of every site's ``network_move``; ``cpu`` gets the CPU seconds every process of the
    three sites spent from the first line fed to the archive's last done; ``profile`` the lines of
    :mod:`bench.cascade_profile` about that time."""
    move: dict[str, object] = {} if custody else {"custody": False, "remove_source": True}
    move.update(extra or {})
    chain = Cascade(root, ["mountain", "valley", "archive"], move=move,
                    pop={} if concurrency is None else {"concurrency": concurrency}, link=link)
    records = make_files(root / "data", files, size)
    chain.start()
    archive = chain.last.store()
    try:
        await asyncio.sleep(2.0)  # daemons up: their start is not the flow's
        ports = [int(site.redis.url.rsplit(":", 1)[1].split("/")[0]) for site in chain.sites]
        before = cpu_seconds(root, ports)
        names = [site.name for site in chain.sites]
        parts = dict(zip(ports, names, strict=True))
        by_part = cascade_profile.cpu_by_part(root, names, parts) if profile is not None else {}
        started = time.time()
        start = time.perf_counter()
        result = await Feeder(LOOPBACK, chain.first.port, window=files + 1, retry_for=30.0).feed(records)
        assert result.pushed == files, result.summary()
        async def archived_all() -> bool:
            return await counter(archive, "done") >= files

        async def sources_gone() -> bool:
            return not await asyncio.to_thread(lambda: any(os.path.exists(r.path) for r in records))

        await eventually(archived_all, FLOW_TIMEOUT, what="every record done at the archive")
        archived = time.perf_counter() - start
        if cpu is not None:
            after = cpu_seconds(root, ports)
            cpu.append(sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items()))
        if profile is not None:
            profile += cascade_profile.cpu_lines(by_part, cascade_profile.cpu_by_part(root, names, parts), archived)
            profile += cascade_profile.timeline(root, names, started)
        if not custody:
            return archived, None
        await eventually(sources_gone, FLOW_TIMEOUT, what="every receipt back")
        return archived, time.perf_counter() - start
    finally:
        await archive.close()
        chain.stop()


async def rates(args: argparse.Namespace) -> list[str]:
    runs: dict[bool, list[float]] = {True: [], False: []}
    receipts: list[float] = []
    for round_ in range(args.rounds):
        for custody in ((True, False) if round_ % 2 == 0 else (False, True)):
            root = Path(tempfile.mkdtemp(prefix="dataq-cascade-"))
            try:
                archived, confirmed = await one_flow(root, args.files, args.size, args.concurrency, custody)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            runs[custody].append(args.files / archived)
            if confirmed is not None:
                receipts.append(confirmed)
            print(f"round {round_ + 1} custody={custody}: {args.files / archived:,.0f} records/s end to end"
                  + (f", every source deleted after {confirmed:.2f} s" if confirmed is not None else ""),
                  file=sys.stderr)
    with_custody, without = statistics.median(runs[True]), statistics.median(runs[False])
    return [
        f"| end to end, {args.files:,} × {args.size // 1000} KB, 3 sites | records/s |",
        "| --- | ---: |",
        f"| without custody (`custody = false`, `remove_source = true`) | {without:,.0f} |",
        f"| with custody (`remove_source = \"after_receipt\"`) | {with_custody:,.0f} |",
        f"| ratio (goal ≥ 0.9) | {with_custody / without:.2f} |",
        f"| with custody: every receipt back, every mountain source deleted | "
        f"{statistics.median(receipts):.2f} s after the first line |",
        f"\nper round, records/s: with {', '.join(f'{r:,.0f}' for r in runs[True])}; "
        f"without {', '.join(f'{r:,.0f}' for r in runs[False])}",
    ]


def rsync_chain(root: Path, files: int, size: int, link: tuple[float, float | None] | None,
                cpu: list[float] | None = None) -> float:
    """Seconds for one bulk ``rsync -a --checksum`` mountain → valley, then one valley → archive; ``cpu`` gets
    the CPU seconds of its rsyncs (clients and daemons) and links."""
    used_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    make_files(root / "mountain", files, size)
    hops = [root / "valley", root / "archive"]
    with contextlib.ExitStack() as stack:
        urls = []
        for n, directory in enumerate(hops):
            directory.mkdir()
            daemon = stack.enter_context(rsync_daemon(root / f"rsyncd-{n}", {"incoming": directory}))
            port = daemon.port if link is None else stack.enter_context(
                link_process((LOOPBACK, daemon.port), delay=link[0], mbit=link[1]))
            urls.append(f"rsync://{LOOPBACK}:{port}/incoming/")
        started = time.perf_counter()
        for source, url in zip([root / "mountain", hops[0]], urls, strict=True):
            subprocess.run(["rsync", "-a", "--checksum", f"{source}/", url], check=True)
        seconds = time.perf_counter() - started
    if cpu is not None:  # the daemons and links are reaped by now: their time counts
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(used.ru_utime + used.ru_stime - used_before.ru_utime - used_before.ru_stime)
    return seconds


def move_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` with a TOML value: ``max_batch_size=100``."""
    key, _, value = text.partition("=")
    return key, tomllib.loads(f"v = {value}")["v"]


def parse_link(delay: str | None, mbit: float | None) -> tuple[float, float | None] | None:
    """``75ms`` (or seconds) and megabits per second as a link's settings; None: loopback as it is."""
    if delay is None:
        return None if mbit is None else (0.0, mbit)
    seconds = float(delay[:-2]) / 1000 if delay.endswith("ms") else float(delay.rstrip("s"))
    return seconds, mbit


async def versus_rsync(args: argparse.Namespace) -> list[str]:
    link = parse_link(args.link, args.mbit)
    ours: list[float] = []
    chain: list[float] = []
    ours_cpu: list[float] = []
    chain_cpu: list[float] = []
    for round_ in range(args.rounds):
        for which in (("dataq", "rsync") if round_ % 2 == 0 else ("rsync", "dataq")):
            root = Path(tempfile.mkdtemp(prefix="dataq-cascade-"))
            try:
                if which == "dataq":
                    profile: list[str] | None = [] if args.profile else None
                    ours.append((await one_flow(root, args.files, args.size, args.concurrency, True, link,
                                                dict(args.move), ours_cpu, profile))[0])
                    if profile:
                        print(f"round {round_ + 1}, dataq:", *profile, sep="\n", file=sys.stderr)
                else:
                    chain.append(await asyncio.to_thread(rsync_chain, root, args.files, args.size, link, chain_cpu))
            finally:
                shutil.rmtree(root, ignore_errors=True)
        print(f"round {round_ + 1}: dataq {ours[-1]:.2f} s ({ours_cpu[-1]:.2f} CPU s), rsync chain {chain[-1]:.2f} s "
              f"({chain_cpu[-1]:.2f} CPU s)", file=sys.stderr)
    where = "loopback" if link is None else f"{link[0] * 1000:g} ms each way" + (
        f", {link[1]:g} Mbit/s" if link[1] is not None else "")
    dataq, rsync = statistics.median(ours), statistics.median(chain)
    return [
        f"| {args.files:,} files of {args.size // 1000} KB, 3 sites, {where} | s |",
        "| --- | ---: |",
        f"| rsync chain (`rsync -a --checksum` mountain → valley, then valley → archive) | {rsync:.2f} |",
        f"| dataq, first line fed to the archive's last done ({args.files / dataq:,.0f} files/s) | {dataq:.2f} |",
        f"| ratio, the chain's time over dataq's (goal ≥ 1.0) | **{rsync / dataq:.2f}** |",
        f"| CPU seconds of every process: rsync chain / dataq's three sites (medians; {os.cpu_count()} CPUs) | "
        f"{statistics.median(chain_cpu):.2f} / {statistics.median(ours_cpu):.2f} |",
    ]


async def remembered(store: QueueStore, count: int, chunk: int = 10_000) -> None:
    """Push, claim and acknowledge ``count`` records as a pop daemon does: each is then remembered done."""
    await store.heartbeat(WORKER, {}, {}, 3600.0)
    for first in range(0, count, chunk):
        records = [Record(f"/data/f{n}", hashlib.md5(str(n).encode()).hexdigest(), n)
                   for n in range(first, min(count, first + chunk))]
        await store.push_batch(records, source="bench")
        claim = await store.claim(WORKER, len(records))
        await store.ack(WORKER, [(record.checksum, "") for record in claim.records])


WITH_RECEIPT = """
local values = redis.call('HGETALL', KEYS[1])
for i = 1, #values, 2 do redis.call('HSET', KEYS[1], values[i], values[i + 1] .. ',1234') end
"""
"""Each remembered value as a receipt leaves it at a site that hands records on (``custody_step.lua``)."""


async def memory_of_remembered(store: QueueStore) -> tuple[int, int, set[str]]:
    """Keys of the remembered done records, their bytes (``MEMORY USAGE``, exact) and their encodings."""
    total, keys, encodings = 0, 0, set()
    async for key in store.r.scan_iter(match="dq:{bench}:done:*", count=1000):
        total += int(await store.r.memory_usage(key, samples=0))
        encodings.add(await store.r.object("encoding", key))
        keys += 1
    return keys, total, encodings


async def memory_of_custody(store: QueueStore, count: int, chunk: int = 1000) -> int:
    """``MEMORY USAGE`` of the custody keys once ``count`` records are in custody (kept as network_move does)."""
    now = time.time()
    stamp = 1_764_000_000_000_000_000  # a file time in ns, as os.stat gives it
    for first in range(0, count, chunk):
        entries = [CustodyEntry(Record(f"/data/instrument/2026-11-26/c4d_261126_{n:08d}_ori.fits.fz",
                                       hashlib.md5(f"custody {n}".encode()).hexdigest(), 50_000_000 + n,
                                       pushed_at=now, source="10.0.0.1:40000"),
                                "valley.example.org:9988", now,
                                identity=(2049, 1_000_000 + n, 50_000_000 + n, stamp, stamp))
                   for n in range(first, min(count, first + chunk))]
        await store.keep(entries, first_ask=now + 10, now=now)
    return sum([int(await store.r.memory_usage(key, samples=0)) for key in store.keys.custody_keys()])


async def redis_costs(args: argparse.Namespace) -> list[str]:
    root = Path(tempfile.mkdtemp(prefix="dataq-remembered-"))
    server = EmbeddedRedis(root, port=0, appendfsync="always")
    server.start()
    store = QueueStore.from_url(server.url, "bench", events_max_len=0)
    try:
        started = time.perf_counter()
        await remembered(store, args.ids)
        filled = time.perf_counter() - started
        keys, total, encodings = await memory_of_remembered(store)
        custody_bytes = await memory_of_custody(store, args.custody)
        ids = [hashlib.md5(str(n).encode()).hexdigest() for n in range(0, args.ids, max(1, args.ids // 100_000))]
        before = await store.r.info("commandstats")
        started = time.perf_counter()
        for first in range(0, len(ids), 1000):
            known = await store.whereabouts(ids[first:first + 1000], max_errors=0)
            assert all(item is not None for item in known)
        wall = time.perf_counter() - started
        after = await store.r.info("commandstats")
        # At a site that hands records on, a receipt adds the end of the chain's time to each value.
        async for key in store.r.scan_iter(match="dq:{bench}:done:*", count=1000):
            await store.r.eval(WITH_RECEIPT, 1, key)
        _, relayed, relayed_encodings = await memory_of_remembered(store)
    finally:
        await store.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    usec = after["cmdstat_evalsha"]["usec"] - before["cmdstat_evalsha"]["usec"]
    return [
        f"| remembered done ids: {args.ids:,} (pushed, claimed, acknowledged in {filled:.0f} s) | |",
        "| --- | ---: |",
        f"| `MEMORY USAGE` of the {keys:,} shard keys (encodings {', '.join(sorted(encodings))}) | "
        f"{total / 2**20:,.1f} MiB |",
        f"| bytes per remembered id (goal ≤ 64) | {total / args.ids:.1f} |",
        f"| bytes per remembered id at a site that hands records on, after their receipts (encodings "
        f"{', '.join(sorted(relayed_encodings))}) | {relayed / args.ids:.1f} |",
        f"| bytes per record in custody ({args.custody:,} records, 60-character paths: the custody hash and its "
        f"three indexes) | {custody_bytes / args.custody:.0f} |",
        f"| receipts query, Redis time per id (`INFO commandstats`, {len(ids):,} ids by 1,000) | "
        f"{usec / len(ids):.2f} µs |",
        f"| receipts query, client wall time per id | {wall / len(ids) * 1e6:.2f} µs |",
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--size", type=int, default=4096, help="bytes per file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=None,
                        help="each site's [pop] concurrency (default: 64, or [pop]'s own with --versus-rsync)")
    parser.add_argument("--versus-rsync", action="store_true", help="against the bulk rsync chain (see above)")
    parser.add_argument("--link", default=None, help="one-way delay of each hop, e.g. 75ms (--versus-rsync)")
    parser.add_argument("--mbit", type=float, default=None, help="each hop's bandwidth, Mbit/s (--versus-rsync)")
    parser.add_argument("--move", type=move_option, action="append", default=[], metavar="KEY=VALUE",
                        help="an option of every site's network_move, its value in TOML (--versus-rsync; repeatable)")
    parser.add_argument("--profile", action="store_true",
                        help="each dataq round's CPU by process and its batches' timeline (--versus-rsync)")
    parser.add_argument("--ids", type=int, default=1_000_000, help="remembered ids for the memory figure")
    parser.add_argument("--custody", type=int, default=100_000, help="records in custody for its memory figure")
    parser.add_argument("--skip-rates", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    print(f"# bench/cascade.py on {platform.node()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}; sites in "
          f"{tempfile.gettempdir()} (ext4 journal: {journaled(Path(tempfile.gettempdir()))}: "
          "bench/recently_deleted.py)")
    if args.versus_rsync:
        print("\n".join(await versus_rsync(args)))
        return
    if args.concurrency is None:
        args.concurrency = 64
    if not args.skip_rates:
        print("\n".join(await rates(args)))
    if not args.skip_memory:
        print()
        print("\n".join(await redis_costs(args)))


if __name__ == "__main__":
    asyncio.run(main())
