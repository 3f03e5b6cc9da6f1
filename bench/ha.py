"""High availability: what replicated acknowledgements cost, and what a fail-over costs a feeder.

**Throughput** (the table DolphinDB publishes for its HA streams, on dataq's work): unique records fed over
loopback to ``dataq push`` (a subprocess) with 1 and 4 feeders at windows of 1, 100, 1,000 and 10,000 records in
flight, against three set-ups started fresh for the run, every server with ``appendfsync always``:

* ``plain``: one Redis;
* ``replica``: a master with one replica, ``min_replicas = 0`` (the replica may lag the acknowledgement);
* ``wait``: the same with ``min_replicas = 1`` (``Pushed`` only once the replica holds the record: one WAIT per
  group commit).

The set-ups take turns cell by cell, so the VM's drift hits them alike; each cell is the median of the rounds.
Each cell also measures its physical ceiling on the same servers (:mod:`bench.raw_writes`): as many connections
as feeders, each sending its window of SETs at once (with a WAIT for the ``wait`` set-up) and the next window once
every reply is in. Its ratios are what a replica and its confirmation cost Redis itself on this machine at that
window, before dataq does anything: with master and replica on one host they share its cores and its disk. After
each round, ``redis-benchmark`` (4 connections of 100 pipelined SETs) shows the replica's cost to Redis's own C
client too.

**Fail-overs**: a master, two replicas (the three data hosts of docs/ha.md) and three sentinels
(``down-after-milliseconds`` 1000, quorum 2), ``min_replicas = 1``. One feeder (window 100) feeds; the master is
SIGKILLed mid-feed, the sentinels promote a replica and point the other at it, and the killed master is started
again (it becomes a replica too). Measured: the longest time the feeder went without a ``Pushed`` reply,
and whether every record answered ``Pushed`` is on the new master. Then the same with a pop daemon running a
slow action (``mark``) on a full queue: how many records run twice (what a fail-over may still cause), and
that every record ran.

    .venv/bin/python bench/ha.py            # 3 rounds (a few minutes)
    .venv/bin/python bench/ha.py --quick    # fewer records, 1 round
    .venv/bin/python bench/ha.py --throughput-only --replica-appendfsync everysec
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.push import LOAD_BEFORE, dataq_command, fsynced_round_trips, lines, machine, push_daemon
from bench.raw_writes import acknowledged_writes
from dataq.actions.testing import marks
from dataq.config import load_settings
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.errors import StoreUnavailable
from dataq.feed.client import Feeder
from dataq.protocol import Reply, ReplyKind
from dataq.record import Record
from dataq.store import QueueList, QueueStore, redis_address
from testbed.sentinel import DOWN_AFTER_MS, SentinelTopology, port_of, start_replica_pair

QUEUE = "transfer"
WINDOWS = (1, 100, 1_000, 10_000)
FEEDERS = (1, 4)
RECORDS_FULL = {1: 3_000, 100: 60_000, 1_000: 150_000, 10_000: 150_000}
RECORDS_QUICK = {1: 1_000, 100: 20_000, 1_000: 40_000, 10_000: 40_000}
SETUPS = ("plain", "replica", "wait")
FAILOVER_RECORDS = 60_000
FAILOVER_WINDOW = 100
POP_RECORDS = 4_000
POP_CONCURRENCY = 32
POP_ACTION_SECONDS = 0.02
FAILOVER_REPLICAS = 2
"""Three data servers, as in the three-host layout of docs/ha.md: one replica is left to confirm writes at once."""
FAILOVER_BUDGET = DOWN_AFTER_MS / 1000 + 3
"""The issue's target for the longest stall of a feeder across a fail-over, in seconds."""
CEILING_WRITES = 400_000
CEILING_CONNECTIONS = 4
CEILING_PIPELINE = 100


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


async def feed(port: int, window: int, feeders: int, start: int, count: int) -> tuple[float, float]:
    """Records/s of ``feeders`` feeders together (every reply must be Pushed), and the share of the machine's
    CPU time that was busy meanwhile."""
    per_feeder = count // feeders
    batches = [lines(start + i * per_feeder, per_feeder) for i in range(feeders)]
    runs = [Feeder("127.0.0.1", port, window=window, keep_replies=False) for _ in range(feeders)]
    busy_before, total_before = cpu_jiffies()
    began = time.perf_counter()
    results = await asyncio.gather(*(f.feed(batch) for f, batch in zip(runs, batches, strict=True)))
    elapsed = time.perf_counter() - began
    busy_after, total_after = cpu_jiffies()
    pushed = sum(result.pushed for result in results)
    if pushed != per_feeder * feeders:
        raise SystemExit(f"only {pushed} of {per_feeder * feeders} records came back Pushed: {results}")
    return pushed / elapsed, (busy_after - busy_before) / max(1, total_after - total_before)


Cells = dict[tuple[str, int, int], list[tuple[float, float]]]
"""(set-up, window, feeders) -> (records/s, CPU busy share) of each round."""
Ceilings = dict[str, list[float]]
""""plain" and "replica" -> redis-benchmark's writes/s of each round."""
RawCeilings = dict[tuple[str, int, int], list[float]]
"""(set-up, window, connections) -> Redis's own acknowledged writes/s of each round (bench/raw_writes.py)."""


def redis_ceiling(url: str) -> float:
    ceiling = fsynced_round_trips(url, CEILING_WRITES, CEILING_CONNECTIONS, CEILING_PIPELINE)
    assert ceiling is not None, "throughput() checks for redis-benchmark first"
    return ceiling.rate


Measured = tuple[Cells, RawCeilings, Ceilings]


async def throughput(quick: bool, repeat: int, replica_appendfsync: str) -> Measured:
    if shutil.which("redis-benchmark") is None:
        raise SystemExit("redis-benchmark (Debian's redis-tools) is needed for the ceiling: make install-test")
    counts = RECORDS_QUICK if quick else RECORDS_FULL
    rates: Cells = {(s, w, f): [] for s in SETUPS for w in WINDOWS for f in FEEDERS}
    raw: RawCeilings = {(s, w, f): [] for s in SETUPS for w in WINDOWS for f in FEEDERS}
    ceilings: Ceilings = {"plain": [], "replica": []}
    with tempfile.TemporaryDirectory(prefix="dataq-bench-ha-") as tmp:
        root = Path(tmp)
        plain = EmbeddedRedis(root / "plain", port=0, appendfsync="always")
        plain.start()
        master, replica = start_replica_pair(root / "pair", replica_appendfsync)
        urls = {"plain": plain.url, "replica": master.url, "wait": master.url}
        stores = {name: QueueStore.from_url(url, QUEUE) for name, url in urls.items()}
        try:
            with push_daemon(root / "d-plain", plain.url) as (plain_port, _), \
                    push_daemon(root / "d-replica", master.url) as (replica_port, _), \
                    push_daemon(root / "d-wait", master.url, redis_extra="min_replicas = 1\n") as (wait_port, _):
                ports = {"plain": plain_port, "replica": replica_port, "wait": wait_port}
                redis_ports = {"plain": port_of(plain), "replica": port_of(master), "wait": port_of(master)}
                start = 0
                for round_ in range(repeat):
                    for window in WINDOWS:
                        for feeders in FEEDERS:
                            for name in SETUPS:
                                cell = await feed(ports[name], window, feeders, start, counts[window])
                                rates[name, window, feeders].append(cell)
                                start += counts[window]
                                await stores[name].clear()
                                raw[name, window, feeders].append(await acknowledged_writes(
                                    redis_ports[name], window, feeders, counts[window], wait=name == "wait"))
                            print(f"  round {round_ + 1}: window {window:>6,} x {feeders}: " + ", ".join(
                                f"{name} {rates[name, window, feeders][-1][0]:,.0f} "
                                f"(Redis alone {raw[name, window, feeders][-1]:,.0f})" for name in SETUPS),
                                file=sys.stderr)
                    ceilings["plain"].append(redis_ceiling(plain.url))
                    ceilings["replica"].append(redis_ceiling(master.url))
                    print(f"  round {round_ + 1}: redis-benchmark plain {ceilings['plain'][-1]:,.0f}, "
                          f"with replica {ceilings['replica'][-1]:,.0f}", file=sys.stderr)
        finally:
            for store in stores.values():
                await store.close()
            replica.stop()
            master.stop()
            plain.stop()
    return rates, raw, ceilings


async def failover() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="dataq-bench-failover-") as tmp:
        root = Path(tmp)
        topology = SentinelTopology(root / "topology", replicas=FAILOVER_REPLICAS)
        try:
            topology.start()
            sentinels = ", ".join(f'"{address}"' for address in topology.sentinel_addresses)
            redis_table = (f'sentinels = [{sentinels}]\nmaster_name = "{topology.master_name}"\nmin_replicas = 1\n'
                           "socket_timeout = 2.0\n")
            with push_daemon(root / "daemon", None, redis_extra=redis_table) as (port, _):
                records = lines(0, FAILOVER_RECORDS)
                last_pushed = time.monotonic()
                longest_stall = 0.0
                killed_at: float | None = None
                stall_ended = time.monotonic()
                under_way = asyncio.Event()
                pushed_count = 0

                def on_reply(index: int, reply: Reply) -> None:
                    nonlocal last_pushed, longest_stall, stall_ended, pushed_count
                    if reply.kind is not ReplyKind.PUSHED:
                        return
                    pushed_count += 1
                    if pushed_count >= FAILOVER_RECORDS // 4:
                        under_way.set()
                    now = time.monotonic()
                    if now - last_pushed > longest_stall:
                        longest_stall = now - last_pushed
                        stall_ended = now
                    last_pushed = now

                feeder = Feeder("127.0.0.1", port, window=FAILOVER_WINDOW, retry_for=300, on_reply=on_reply)
                task = asyncio.create_task(feeder.feed(records))
                await under_way.wait()
                old = topology.current_master_address()
                killed_at = time.monotonic()
                topology.kill_master()
                await asyncio.to_thread(topology.wait_for_failover, old)
                promoted = time.monotonic() - killed_at
                final = await asyncio.to_thread(topology.restart_killed)
                rejoined = time.monotonic() - killed_at
                result = await task

            store = QueueStore.from_url(f"redis://{final[0]}:{final[1]}", QUEUE)
            try:
                tracked = {record.checksum for record in await store.list_records(QueueList.ACTIVE)}
            finally:
                await store.close()
            pushed = {reply.detail for reply in result.replies or [] if reply.kind is ReplyKind.PUSHED}
            if longest_stall > FAILOVER_BUDGET:
                kept = Path(tempfile.mkdtemp(prefix="dataq-bench-slow-failover-"))
                shutil.copytree(root, kept, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("*.aof", "*.rdb", "appendonlydir", "*.sock"))
                print(f"  a stall over the target: logs of the servers, sentinels and daemon kept in {kept}",
                      file=sys.stderr)
            return {
                "pushed": len(pushed),
                "errors": result.errors,
                "resent": result.resent,
                "lost": len(pushed - tracked),
                "promoted_s": promoted,
                "replica_back_s": rejoined,
                "stall_ended_after_kill_s": stall_ended - killed_at,
                "longest_stall_s": longest_stall,
            }
        finally:
            topology.stop()


def report_throughput(measured: Measured, quick: bool, repeat: int, replica_appendfsync: str) -> None:
    rates, raw, ceilings = measured
    counts = RECORDS_QUICK if quick else RECORDS_FULL
    print(f"\npush throughput with replication, records/s: median of {repeat} round(s); records per cell: "
          + ", ".join(f"window {w:,}: {n:,}" for w, n in counts.items()))
    print(f"machine: {machine()}; load average before the run: {LOAD_BEFORE}")
    print(f"appendfsync always on the masters, {replica_appendfsync} on the replica; replica: master + 1 replica, "
          "min_replicas 0; wait: the same with min_replicas 1\n")
    print("| window | feeders | plain | replica | wait | wait / plain | wait / replica | CPU busy: plain / wait "
          "| Redis alone: plain | replica | wait | wait / plain | replica / plain |")
    print("|-------:|--------:|------:|--------:|-----:|-------------:|---------------:|-----------------------:"
          "|------:|------:|------:|------:|------:|")
    for window in WINDOWS:
        for feeders in FEEDERS:
            medians = {name: statistics.median(c[0] for c in rates[name, window, feeders]) for name in SETUPS}
            busy = {name: statistics.median(c[1] for c in rates[name, window, feeders]) for name in SETUPS}
            alone = {name: statistics.median(raw[name, window, feeders]) for name in SETUPS}
            print(f"| {window:,} | {feeders} | {medians['plain']:,.0f} | {medians['replica']:,.0f} | "
                  f"{medians['wait']:,.0f} | {medians['wait'] / medians['plain']:.2f} | "
                  f"{medians['wait'] / medians['replica']:.2f} | "
                  f"{busy['plain']:.0%} / {busy['wait']:.0%} | {alone['plain']:,.0f} | {alone['replica']:,.0f} | "
                  f"{alone['wait']:,.0f} | {alone['wait'] / alone['plain']:.2f} | "
                  f"{alone['replica'] / alone['plain']:.2f} |")
    plain, replica = (statistics.median(ceilings[name]) for name in ("plain", "replica"))
    print(f"\nceiling, redis-benchmark ({CEILING_CONNECTIONS} connections x {CEILING_PIPELINE} pipelined SETs, "
          f"same servers, after each round): plain {plain:,.0f}/s, master with its replica {replica:,.0f}/s; "
          f"replica / plain {replica / plain:.2f} (rounds: "
          + ", ".join(f"{r / p:.2f}" for p, r in zip(ceilings["plain"], ceilings["replica"], strict=True)) + ")")


def report_failover(outcome: dict[str, float]) -> None:
    print(f"\nfail-over under a feed (1 feeder, window {FAILOVER_WINDOW}, {FAILOVER_RECORDS:,} records, "
          f"min_replicas 1, down-after {DOWN_AFTER_MS} ms):")
    print(f"  sentinels named the new master {outcome['promoted_s']:.1f} s after the kill; the killed server, "
          f"restarted, was back in the replication {outcome['replica_back_s']:.1f} s after it")
    print(f"  longest time the feeder went without a Pushed reply: {outcome['longest_stall_s']:.1f} s (target <= "
          f"{FAILOVER_BUDGET:.0f} s), ending {outcome['stall_ended_after_kill_s']:.1f} s after the kill")
    print(f"  {outcome['pushed']:,.0f} records Pushed, {outcome['resent']:,.0f} resends asked for "
          f"(not replicated in time), {outcome['errors']:,.0f} errors, {outcome['lost']:,.0f} Pushed records "
          "missing on the new master")


async def pop_failover() -> dict[str, float]:
    """A pop daemon (subprocess) running a slow action across a master's SIGKILL: how many records run twice."""
    with tempfile.TemporaryDirectory(prefix="dataq-bench-pop-failover-") as tmp:
        root = Path(tmp)
        topology = SentinelTopology(root / "topology", replicas=FAILOVER_REPLICAS)
        marks_dir = root / "marks"
        marks_dir.mkdir()
        try:
            topology.start()
            sentinels = ", ".join(f'"{address}"' for address in topology.sentinel_addresses)
            config = root / "dataq.toml"
            config.write_text(
                f'data_dir = "{root}"\n[redis]\nsentinels = [{sentinels}]\nmaster_name = "{topology.master_name}"\n'
                f'min_replicas = 1\nsocket_timeout = 2.0\n[log]\ndir = "{root / "log"}"\nlevel = "warning"\n'
                f"[metrics]\nenabled = false\n[pop]\nconcurrency = {POP_CONCURRENCY}\n"
                f'[queues.{QUEUE}]\nactions = ["mark"]\n[queues.{QUEUE}.mark]\ndir = "{marks_dir}"\n'
                f"seconds = {POP_ACTION_SECONDS}\n"
            )
            settings = load_settings(config)
            address = redis_address(settings)
            assert address is not None
            store = QueueStore.open(settings, address, QUEUE)
            records = [Record(f"/data/{n:06d}.fits", f"{n:032x}", n) for n in range(POP_RECORDS)]
            await store.push_batch(records, source="bench")
            # Its log is in the [log] dir; the console copy would only clutter the report.
            pop = await asyncio.create_subprocess_exec(*dataq_command(), "pop", "--config", str(config),
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                # The marks are files that another process writes: nothing to wait on but the directory.
                while len(marks(marks_dir)) < POP_RECORDS // 4:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                in_flight = (await store.summary()).in_flight
                killed_at = time.monotonic()
                old = topology.current_master_address()
                topology.kill_master()
                await asyncio.to_thread(topology.wait_for_failover, old)
                # The killed server comes back meanwhile, as under systemd; the drain does not wait for it.
                rejoin = asyncio.create_task(asyncio.to_thread(topology.restart_killed))
                while True:
                    with contextlib.suppress(StoreUnavailable):
                        summary = await store.summary()
                        if summary.tracked == summary.inactive:
                            break
                    await asyncio.sleep(0.1)
                drained = time.monotonic() - killed_at
                await rejoin
            finally:
                pop.terminate()
                await pop.wait()
                await store.close()
            ran = marks(marks_dir)
            return {"records": POP_RECORDS, "in_flight_at_kill": in_flight, "runs": len(ran),
                    "reruns": len(ran) - len(set(ran)), "never_ran": POP_RECORDS - len(set(ran)),
                    "inactive": summary.inactive, "drained_s": drained}
        finally:
            topology.stop()


def report_pop_failover(outcome: dict[str, float]) -> None:
    print(f"\npop daemon across a fail-over ({outcome['records']:,.0f} records, action mark {POP_ACTION_SECONDS} s, "
          f"concurrency {POP_CONCURRENCY}, min_replicas 1; master SIGKILLed after a quarter ran):")
    print(f"  {outcome['in_flight_at_kill']:,.0f} records in flight at the kill; {outcome['reruns']:,.0f} ran twice; "
          f"{outcome['never_ran']:,.0f} never ran; {outcome['inactive']:,.0f} inactive; queue drained "
          f"{outcome['drained_s']:.1f} s after the kill")


async def run(quick: bool, repeat: int, parts: str, replica_appendfsync: str, failover_runs: int) -> None:
    if parts != "failover":
        report_throughput(await throughput(quick, repeat, replica_appendfsync), quick, repeat, replica_appendfsync)
    if parts == "throughput":
        return
    lost = 0.0
    for _ in range(failover_runs):
        outcome = await failover()
        report_failover(outcome)
        lost += outcome["lost"]
    popped = await pop_failover()
    report_pop_failover(popped)
    if lost or popped["never_ran"]:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer records per cell, one round")
    parser.add_argument("--repeat", type=int, default=3, help="rounds over every cell (default 3)")
    parts = parser.add_mutually_exclusive_group()
    parts.add_argument("--failover-only", action="store_true", help="skip the throughput table")
    parts.add_argument("--throughput-only", action="store_true", help="only the throughput table")
    parser.add_argument("--failover-runs", type=int, default=1,
                        help="fail-overs under a feed, one after the other (default 1); the logs of one whose stall "
                             "exceeds the target are kept")
    parser.add_argument("--replica-appendfsync", choices=("always", "everysec"), default="always",
                        help="fsync policy of the replica in the throughput table (default always)")
    args = parser.parse_args()
    parts = "failover" if args.failover_only else "throughput" if args.throughput_only else "all"
    asyncio.run(run(args.quick, 1 if args.quick else args.repeat, parts, args.replica_appendfsync,
                    args.failover_runs))


if __name__ == "__main__":
    main()
