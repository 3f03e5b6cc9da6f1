"""An audit of a directory at rest, chain questions included, against the plain tools on the same tree, as ratios.

Two sites on this machine, each with its own redis-server: a mountain whose queue hands records on to an archive
(``network_move`` with ``next_sites``), and the archive, whose ``dataq push`` answers audit questions and whose
``disk_store`` root holds a copy of every file (hard links to the sources, named by the default layout) named by
its manifest. Every file's record is done at both sites, as after a night that went well. Then, per round, in
turn (the order alternating by round, each after a ``sync``):

* ``dataq audit --json DIR`` at the mountain (a subprocess): every file hashed on every core, this site's Redis
  asked, then the archive's push daemon over loopback, every copy looked at; from start to exit;
* ``md5sum`` of every file on both cores (``find -print0 | xargs -0 -P CPUS -n 256 md5sum``): reading and hashing
  every byte, the floor;
* ``rsync -anc DIR/ MIRROR/`` against a mirror of the same files (hard links): rsync's dry-run checksum compare,
  which reads both sides.

The page cache holds the files in every run (the machine has the memory): the ratio compares the work, not the
disk. Goal: the audit within 1.3 times md5sum's time. The table gives medians; each audit must find every file
``arrived``. A second table splits the CPU time of each run by process (the audit, the archive's push daemon that
answers it, the two redis-servers, md5sum's processes): on a machine whose every core hashes, the wall time cannot
fall below the CPU time over the cores.

Run it::

    .venv/bin/python bench/audit.py [--small 100000] [--large 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataq.audit import manifest
from dataq.embedded.redis_server import EmbeddedRedis, free_port
from dataq.record import Record
from dataq.store import QueueStore
from testbed.settings_file import write_tables

QUEUE = "transfer"
SMALL_BYTES = 20_000
LARGE_BYTES = 30_000_000
BATCH = 1000


@dataclass
class Scenario:
    label: str
    count: int
    size: int
    audit: list[float] = field(default_factory=list)
    md5sum: list[float] = field(default_factory=list)
    rsync: list[float] = field(default_factory=list)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    """CPU seconds per audit run, by process; ``md5sum``: per md5sum run."""

    def cpu_row(self) -> str:
        cpu = {name: statistics.median(times) for name, times in self.cpu.items()}
        ours = cpu["audit"] + cpu["archive push"] + cpu["redis"]
        cores = os.cpu_count() or 1
        return (f"| {self.label} | {cpu['audit']:.2f} | {cpu['archive push']:.2f} | {cpu['redis']:.2f} | {ours:.2f} "
                f"| {cpu['md5sum']:.2f} | {ours / cores:.2f} | {1e6 * (ours - cpu['md5sum']) / self.count:.1f} |")

    def row(self) -> str:
        audit, md5sum, rsync = (statistics.median(times) for times in (self.audit, self.md5sum, self.rsync))
        return (f"| {self.label} | {self.count:,} | {self.count * self.size / 1e6:,.0f} | {md5sum:.2f} | {rsync:.2f} "
                f"| {audit:.2f} | **{audit / md5sum:.2f}** | {audit / rsync:.2f} | {self.count / audit:,.0f} |")


def make_tree(directory: Path, count: int, size: int) -> list[Record]:
    """``count`` files of random content, in folders of 1,000."""
    records = []
    for n in range(count):
        folder = directory / f"{n // 1000:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        path = folder / f"frame-{n:06d}.fits"
        path.write_bytes(data)
        records.append(Record(str(path), hashlib.md5(data).hexdigest(), size, pushed_at=time.time()))
    return records


def archive_copies(records: list[Record], root: Path) -> None:
    """A copy of every file under ``root`` in the default layout (hard links: at rest, as stored), and the
    manifest naming them."""
    entries = []
    for record in records:
        relative = f"{time.strftime('%Y%m%d', time.gmtime(record.pushed_at))}/{record.checksum[:2]}/{record.checksum}"
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        os.link(record.path, root / relative)
        entries.append(manifest.Entry(record.checksum, relative, record.size))
    for start in range(0, len(entries), BATCH):
        manifest.append(str(root), "md5", entries[start:start + BATCH], sync=False)


async def done_at(url: str, records: list[Record], source: str) -> None:
    """Every record pushed, claimed and acknowledged, as a pop daemon would: remembered done."""
    store = QueueStore.from_url(url, QUEUE)
    try:
        await store.heartbeat("bench-pop", {"role": "pop"}, {"running": 0}, 600.0)
        for start in range(0, len(records), BATCH):
            chunk = records[start:start + BATCH]
            await store.push_batch(chunk, source=source)
            claim = await store.claim("bench-pop", len(chunk))
            await store.ack("bench-pop", [(record.checksum, "") for record in claim.records])
    finally:
        await store.close()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pids: list[int]) -> float:
    """CPU seconds the running processes ``pids`` have used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def timed(argv: list[str], cpu: list[float] | None = None, **kwargs: object) -> float:
    started, used = time.perf_counter(), children_cpu()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    if cpu is not None:
        cpu.append(children_cpu() - used)
    return time.perf_counter() - started


def audit_once(config: Path, tree: Path, count: int, cpu: dict[str, list[float]], push: int,
               redis: list[int]) -> float:
    started, used = time.perf_counter(), children_cpu()
    push_used, redis_used = process_cpu([push]), process_cpu(redis)
    done = subprocess.run([sys.executable, "-c", "from dataq.cli.main import main; main()", "audit", "--config",
                           str(config), "--json", str(tree)], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    cpu.setdefault("audit", []).append(children_cpu() - used)
    cpu.setdefault("archive push", []).append(process_cpu([push]) - push_used)
    cpu.setdefault("redis", []).append(process_cpu(redis) - redis_used)
    summary = json.loads(done.stdout.splitlines()[-1])["summary"] if done.stdout else {}
    if done.returncode != 0 or summary != {"arrived": count}:
        raise SystemExit(f"the audit found something: {done.returncode} {summary} {done.stdout[-2000:]} "
                         f"{done.stderr[-2000:]}")
    return seconds


def one_scenario(scenario: Scenario, rounds: int, work: Path) -> None:
    tree, archive, mirror = work / "night", work / "archive", work / "mirror"
    archive.mkdir()
    records = make_tree(tree, scenario.count, scenario.size)
    archive_copies(records, archive)
    subprocess.run(["cp", "-al", str(tree), str(mirror)], check=True)
    servers = [EmbeddedRedis(work / name, port=0) for name in ("mountain-redis", "archive-redis")]
    for server in servers:
        server.start()
    archive_port = free_port()
    push = None
    try:
        asyncio.run(done_at(servers[0].url, records, "feeder"))
        asyncio.run(done_at(servers[1].url, records, "mountain@127.0.0.1:1"))
        archive_config = write_tables(work / "archive.toml", work / "archive-data", {
            "redis": {"url": servers[1].url}, "log": {"dir": str(work / "log"), "level": "warning"},
            "metrics": {"enabled": False}, "push": {"host": "127.0.0.1"},
            f"queues.{QUEUE}": {"push_port": archive_port, "actions": ["disk_store"]},
            f"queues.{QUEUE}.disk_store": {"root": str(archive)}}, site="archive")
        mountain_config = write_tables(work / "mountain.toml", work / "mountain-data", {
            "redis": {"url": servers[0].url}, "log": {"dir": str(work / "log"), "level": "warning"},
            "feed": {"recursive": True},
            f"queues.{QUEUE}": {"actions": ["network_move"]},
            f"queues.{QUEUE}.network_move": {"destination": "rsync://127.0.0.1:1/incoming",
                                             "next_sites": [f"127.0.0.1:{archive_port}"],
                                             "next_path": "/archive/{relpath}"}}, site="mountain")
        push = subprocess.Popen([sys.executable, "-c", "from dataq.cli.main import main; main()", "push", "--config",
                                 str(archive_config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2.0)
        cpus = str(os.cpu_count() or 1)
        redis = [server.pid for server in servers if server.pid is not None]
        runs = [
            (scenario.audit, lambda: audit_once(mountain_config, tree, scenario.count, scenario.cpu, push.pid, redis)),
            (scenario.md5sum, lambda: timed(["sh", "-c", f"find {tree} -type f -print0 | xargs -0 -P {cpus} -n 256 "
                                                         "md5sum"], scenario.cpu.setdefault("md5sum", []))),
            (scenario.rsync, lambda: timed(["rsync", "-anc", f"{tree}/", f"{mirror}/"])),
        ]
        for round_no in range(rounds):
            for times, run in runs[::-1] if round_no % 2 else runs:
                subprocess.run(["sync"], check=True)
                times.append(run())
    finally:
        if push is not None:
            push.terminate()
            push.wait(30)
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scenarios = [Scenario("small files (20 KB)", args.small, SMALL_BYTES),
                 Scenario("large files (30 MB)", args.large, LARGE_BYTES)]
    load_before = os.getloadavg()[0]
    for scenario in scenarios:
        work = Path(tempfile.mkdtemp(prefix="dataq-bench-audit-", dir=os.environ.get("TMPDIR", "/var/tmp")))
        try:
            one_scenario(scenario, args.rounds, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"dataq audit benchmark: {args.rounds} interleaved rounds, medians; {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} "
          "after")
    print()
    print("| files | count | MB | md5sum s | rsync -anc s | dataq audit s | audit / md5sum | audit / rsync | files/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for scenario in scenarios:
        print(scenario.row())
    print()
    print("CPU seconds per run (medians): the audit's processes against md5sum's; the wall time cannot fall below "
          "the CPU time over the cores")
    print()
    print("| files | audit process | archive push daemon | redis-servers | audit, all | md5sum | audit CPU / cores "
          "| µs of CPU per file beyond md5sum |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for scenario in scenarios:
        print(scenario.cpu_row())
    print()
    print(f"rerun: .venv/bin/python bench/audit.py --small {args.small} --large {args.large} --rounds {args.rounds}")


if __name__ == "__main__":
    main()
