"""Scale-out on Redis Cluster: records/s pushed and processed over 1, 2 and 3 queues, on one Redis and on a
three-master cluster, and what each record costs each Redis in CPU.

Two set-ups, started fresh for the run, every server with ``appendfsync always``:

* ``single``: one redis-server holds every queue;
* ``cluster``: three masters (``redis-cli --cluster create``, no replicas), each queue on its own master.

For N = 1, 2 and 3 queues, one ``dataq push`` daemon per queue (a subprocess) is fed by one feeder (window 1,000)
from this process, all queues at once: **pushed** records/s, all queues together. Then one ``dataq pop`` daemon per
queue (concurrency 64, the no-op action), started with the ``action`` flag off and switched on together, drains
the queues: **processed** records/s. Each Redis's CPU (``used_cpu_user`` + ``used_cpu_sys``) over each phase,
divided by the records it handled, gives its **CPU per record**; the busy share of the machine's two cores says
what bounds the run. Cells take turns (the set-ups alternate, N rises) so the VM's drift hits them alike; each
figure is the median of the rounds.

On this 2-core VM the daemons, the feeders and the servers share two cores, so the cluster cannot show a
three-fold gain: the CPU per record of each Redis is the figure to read the scaling on a larger host from (a
master saturates at 1 / CPU-per-record records/s; N masters on N cores, with daemons on cores of their own,
scale until then).

    .venv/bin/python bench/cluster.py            # 3 rounds of 200,000 records per queue (about 6 minutes)
    .venv/bin/python bench/cluster.py --quick    # 1 round of 30,000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from bench.ha import cpu_jiffies
from bench.pop import wait_for
from bench.push import dataq_command, lines, machine, wait_for_port
from dataq.config import load_settings
from dataq.embedded.redis_server import EmbeddedRedis, free_port
from dataq.feed.client import Feeder
from dataq.keys import QueueKeys
from dataq.store import Flag, QueueStore
from testbed.cluster import ClusterTopology, queue_on_master

QUEUE_COUNTS = (1, 2, 3)
SETUPS = ("single", "cluster")
RECORDS_FULL = 200_000
RECORDS_QUICK = 30_000
WINDOW = 1_000
POP_CONCURRENCY = 64
STARTUP_TIMEOUT = 30.0
RUN_TIMEOUT = 600.0

Address = tuple[str, int]


@dataclass
class Phase:
    rate: float
    """Records/s, all queues together."""
    redis_cpu_us: dict[Address, float]
    """CPU µs per record handled, of each Redis that held a queue."""
    busy: float
    """Share of the machine's CPU time that was busy."""


@dataclass
class Setup:
    name: str
    servers: list[Address]
    url: str
    topology: ClusterTopology | None
    """The cluster (None: one server)."""

    def config(self, directory: Path, queues: list[str]) -> tuple[Path, dict[str, int]]:
        """A settings file serving ``queues`` (each with a push port of its own); returns it and the ports."""
        ports = {queue: free_port() for queue in queues}
        cluster = "true" if self.topology is not None else "false"
        text = [f'data_dir = "{directory}"', "[redis]", f'url = "{self.url}"', f"cluster = {cluster}",
                "[log]", f'dir = "{directory / "log"}"', 'level = "warning"', 'format = "json"',
                "[metrics]", "enabled = false"]
        for queue in queues:
            text += [f"[queues.{queue}]", 'actions = ["noop"]', "max_queue_size = 10000000",
                       f"push_port = {ports[queue]}"]
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "dataq.toml"
        path.write_text("\n".join(text) + "\n")
        return path, ports

    def flush(self) -> None:
        for host, port in self.servers:
            with redis.Redis(host=host, port=port) as server:
                server.flushall()

    def cpu(self) -> dict[Address, float]:
        """Seconds of CPU each server has used so far."""
        used = {}
        for host, port in self.servers:
            with redis.Redis(host=host, port=port, decode_responses=True) as server:
                info = server.info("cpu")
            used[(host, port)] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return used


@contextlib.contextmanager
def setups(root: Path) -> Iterator[dict[str, Setup]]:
    single = EmbeddedRedis(root / "single", port=0, appendfsync="always")
    cluster = ClusterTopology(root / "cluster")
    single.start()
    try:
        cluster.start()
        host, port = single.url.removeprefix("redis://").split(":")
        yield {"single": Setup("single", [(host, int(port))], single.url, None),
               "cluster": Setup("cluster", cluster.masters(), cluster.url, cluster)}
    finally:
        cluster.stop()
        single.stop()


@contextlib.contextmanager
def daemons(kind: str, config: Path, queues: list[str], *extra: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    log = config.parent / f"{kind}.stderr"
    with open(log, "ab") as stderr:
        children = [subprocess.Popen([*dataq_command(), kind, "--config", str(config), "--queue", queue, *extra],
                                     stdout=subprocess.DEVNULL, stderr=stderr) for queue in queues]
    try:
        yield children
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        for child in children:
            child.wait(60)


@contextlib.asynccontextmanager
async def stores(setup: Setup, config: Path, queues: list[str]) -> AsyncIterator[dict[str, QueueStore]]:
    settings = load_settings(config)
    opened = {queue: QueueStore.open(settings, setup.url, queue) for queue in queues}
    try:
        yield opened
    finally:
        for store in opened.values():
            await store.close()


def per_record(before: dict[Address, float], after: dict[Address, float], records: dict[Address, int]
               ) -> dict[Address, float]:
    return {address: (after[address] - before[address]) * 1e6 / count
            for address, count in records.items() if count}


async def push_phase(setup: Setup, config: Path, ports: dict[str, int], holders: dict[str, Address],
                     count: int, start: int) -> Phase:
    queues = list(ports)
    with daemons("push", config, queues) as children:
        for child, queue in zip(children, queues, strict=True):
            wait_for_port(ports[queue], child, f"see {config.parent / 'push.stderr'}")
        batches = {queue: lines(start + index * count, count) for index, queue in enumerate(queues)}
        feeders = {queue: Feeder("127.0.0.1", ports[queue], window=WINDOW, keep_replies=False) for queue in queues}
        cpu_before, jiffies_before = setup.cpu(), cpu_jiffies()
        began = time.perf_counter()
        results = await asyncio.gather(*(feeders[queue].feed(batches[queue]) for queue in queues))
        elapsed = time.perf_counter() - began
        cpu_after, jiffies_after = setup.cpu(), cpu_jiffies()
    pushed = sum(result.pushed for result in results)
    if pushed != count * len(queues):
        raise SystemExit(f"only {pushed} of {count * len(queues)} records came back Pushed ({setup.name})")
    return Phase(pushed / elapsed, per_record(cpu_before, cpu_after, handled(holders, count)),
                 busy_share(jiffies_before, jiffies_after))


async def pop_phase(setup: Setup, config: Path, queues: list[str], holders: dict[str, Address],
                    count: int) -> Phase:
    async with stores(setup, config, queues) as by_queue:
        for store in by_queue.values():
            await store.set_flag(Flag.ACTION, False)
        with daemons("pop", config, queues, "--concurrency", str(POP_CONCURRENCY)):
            await wait_for(lambda: all_registered(by_queue), STARTUP_TIMEOUT, "the pop daemons to register")
            done_before = {queue: (await store.counters()).get("done", 0) for queue, store in by_queue.items()}
            cpu_before, jiffies_before = setup.cpu(), cpu_jiffies()
            began = time.perf_counter()
            await asyncio.gather(*(store.set_flag(Flag.ACTION, True) for store in by_queue.values()))

            async def drained() -> bool:
                for queue, store in by_queue.items():
                    if (await store.counters()).get("done", 0) - done_before[queue] < count:
                        return False
                return True

            await wait_for(drained, RUN_TIMEOUT, "the queues to drain")
            elapsed = time.perf_counter() - began
            cpu_after, jiffies_after = setup.cpu(), cpu_jiffies()
    return Phase(count * len(queues) / elapsed, per_record(cpu_before, cpu_after, handled(holders, count)),
                 busy_share(jiffies_before, jiffies_after))


async def all_registered(by_queue: dict[str, QueueStore]) -> bool:
    for store in by_queue.values():
        if not any(worker.info.get("role") == "pop" and worker.heartbeat for worker in await store.workers()):
            return False
    return True


def handled(holders: dict[str, Address], count: int) -> dict[Address, int]:
    records: dict[Address, int] = {}
    for address in holders.values():
        records[address] = records.get(address, 0) + count
    return records


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    return (after[0] - before[0]) / max(1, after[1] - before[1])


Cells = dict[tuple[str, int, str], list[Phase]]
"""(set-up, queues, 'push' or 'pop') -> each round's phase."""


async def run(quick: bool, repeat: int) -> Cells:
    count = RECORDS_QUICK if quick else RECORDS_FULL
    cells: Cells = {(s, n, p): [] for s in SETUPS for n in QUEUE_COUNTS for p in ("push", "pop")}
    queues = [queue_on_master(index, "bench") for index in range(max(QUEUE_COUNTS))]
    with tempfile.TemporaryDirectory(prefix="dataq-bench-cluster-") as tmp, setups(Path(tmp)) as by_name:
        start = 0
        for round_ in range(repeat):
            for n in QUEUE_COUNTS:
                for name in SETUPS:
                    setup = by_name[name]
                    setup.flush()
                    config, ports = setup.config(Path(tmp) / f"{name}-{n}-{round_}", queues[:n])
                    holders = {queue: holder(setup, queue) for queue in queues[:n]}
                    cells[name, n, "push"].append(await push_phase(setup, config, ports, holders, count, start))
                    cells[name, n, "pop"].append(await pop_phase(setup, config, queues[:n], holders, count))
                    start += count * n
                    pushed, processed = cells[name, n, "push"][-1].rate, cells[name, n, "pop"][-1].rate
                    print(f"  round {round_ + 1}, {n} queue(s), {name}: pushed {pushed:,.0f}/s, processed "
                          f"{processed:,.0f}/s", file=sys.stderr)
    return cells


def holder(setup: Setup, queue: str) -> Address:
    """The server holding ``queue``: the only one, or the master of its slot."""
    return setup.topology.master_of(QueueKeys(queue).records) if setup.topology else setup.servers[0]


def report(cells: Cells, quick: bool, repeat: int) -> None:
    def median(name: str, n: int, phase: str, value: str = "rate") -> float:
        return statistics.median(getattr(p, value) for p in cells[name, n, phase])

    def cpu(name: str, n: int, phase: str) -> str:
        per_server: dict[Address, list[float]] = {}
        for p in cells[name, n, phase]:
            for address, us in p.redis_cpu_us.items():
                per_server.setdefault(address, []).append(us)
        return " / ".join(f"{statistics.median(values):.1f}" for values in per_server.values())

    print(f"# bench/cluster.py: {machine()}")
    print(f"# {RECORDS_QUICK if quick else RECORDS_FULL:,} records per queue, window {WINDOW:,}, pop concurrency "
          f"{POP_CONCURRENCY}, medians of {repeat} round(s)\n")
    for phase, title in (("push", "pushed"), ("pop", "processed")):
        print(f"| queues | single: {title}/s | cluster: {title}/s | cluster / single | cluster scale-out (vs 1 queue) "
              f"| Redis CPU µs/record, single | each master, cluster | CPU busy, single / cluster |")
        print("| ---: | ---: | ---: | ---: | ---: | --- | --- | --- |")
        for n in QUEUE_COUNTS:
            single, cluster = median("single", n, phase), median("cluster", n, phase)
            print(f"| {n} | {single:,.0f} | {cluster:,.0f} | {cluster / single:.2f} | "
                  f"{cluster / median('cluster', 1, phase):.2f} | {cpu('single', n, phase)} | "
                  f"{cpu('cluster', n, phase)} | {median('single', n, phase, 'busy'):.0%} / "
                  f"{median('cluster', n, phase, 'busy'):.0%} |")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, one round")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3, or 1 with --quick)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    cells = asyncio.run(run(args.quick, repeat))
    report(cells, args.quick, repeat)


if __name__ == "__main__":
    main()
