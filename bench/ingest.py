"""Benchmark of archive ingest: files/s and MB/s through the ``archive_ingest`` action (Spark), next to plain
Python (hashlib md5 + copy) on the same files in the same run.

Cases: 10,000 files of 10 KB and 20 files of 100 MB (``--quick``: 2,000 and 4). For each, the action ingests
every file (records submitted at once through ``concurrency`` slots, as a pop daemon with that concurrency does),
then plain Python archives the same files one after the other into another store: md5 while copying to a
temporary file, fsync, rename, fsync of the directory (the action's durability, without Spark, batches,
catalog or FITS headers). Both read the sources from the page cache (they were just written). The Spark session
is warmed up first (a batch of tiny files), so its start-up is not counted.

It starts its own redis-server (for the catalog lease) on a free loopback port and works in a temporary
directory (``--workdir`` to choose where; the full run needs about 6.5 GB).

Rerun: ``.venv/bin/python bench/ingest.py`` (``--quick`` for a short run). ``--queries`` measures the catalog
instead: ``ls`` and ``stats`` over 10^6 rows before and after compaction (:mod:`bench.catalog_queries`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import catalog_queries
from dataq.actions import ActionContext, load_actions
from dataq.config import load_settings
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.logs import configure_logging
from dataq.record import Record
from dataq.store import QueueStore

KB, MB = 1000, 1000 * 1000
FULL_CASES = (("10,000 x 10 KB", 10_000, 10 * KB), ("20 x 100 MB", 20, 100 * MB))
QUICK_CASES = (("2,000 x 10 KB", 2_000, 10 * KB), ("4 x 100 MB", 4, 100 * MB))
WARMUP_FILES = 1000
CHUNK = 1 << 20
QUEUE = "bench"


@dataclass
class Timing:
    case: str
    files: int
    total_bytes: int
    spark_seconds: float
    python_seconds: float

    def row(self) -> dict[str, Any]:
        mb = self.total_bytes / MB
        return {
            "case": self.case, "files": self.files, "MB": round(mb, 1),
            "spark_s": round(self.spark_seconds, 2), "spark_files_s": round(self.files / self.spark_seconds),
            "spark_MB_s": round(mb / self.spark_seconds, 1),
            "python_s": round(self.python_seconds, 2), "python_files_s": round(self.files / self.python_seconds),
            "python_MB_s": round(mb / self.python_seconds, 1),
            "spark_time_over_python": round(self.spark_seconds / self.python_seconds, 2),
        }


def pieces(n: int, size: int, block: bytes) -> list[bytes]:
    """The chunks of file ``n``: its number first (so every file has its own checksum), then ``block`` repeated."""
    first = (n.to_bytes(8, "little") + block)[: min(size, len(block))]
    chunks, left = [first], size - len(first)
    while left:
        chunks.append(block[:left])
        left -= len(chunks[-1])
    return chunks


def make_files(directory: Path, count: int, size: int) -> list[Record]:
    """``count`` distinct files of ``size`` bytes; their records."""
    directory.mkdir(parents=True)
    block = os.urandom(min(size, CHUNK))
    records = []
    for n in range(count):
        path = directory / f"f{n:06d}.dat"
        digest = hashlib.md5()
        with open(path, "wb") as out:
            for chunk in pieces(n, size, block):
                out.write(chunk)
                digest.update(chunk)
        records.append(Record(path=str(path), checksum=digest.hexdigest(), size=size))
    return records


def plain_python(records: list[Record], store: Path, fsync: bool) -> float:
    """md5 while copying each file into a content-addressed store, verified before its rename."""
    started = time.perf_counter()
    for record in records:
        directory = store / record.checksum[:2] / record.checksum[2:4]
        directory.mkdir(parents=True, exist_ok=True)
        temp, target = directory / f".{record.checksum}.tmp", directory / record.checksum
        digest = hashlib.md5()
        with open(record.path, "rb") as source, open(temp, "wb") as out:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
            if fsync:
                out.flush()
                os.fsync(out.fileno())
        if digest.hexdigest() != record.checksum:
            raise AssertionError(f"{record.path}: checksum mismatch")
        os.replace(temp, target)
        if fsync:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)
    return time.perf_counter() - started


async def through_action(action: Any, records: list[Record], concurrency: int) -> float:
    slots = asyncio.Semaphore(concurrency)

    async def one(record: Record) -> None:
        async with slots:
            await action.run(record)

    started = time.perf_counter()
    await asyncio.gather(*(one(record) for record in records))
    return time.perf_counter() - started


def write_settings(work: Path, url: str, args: argparse.Namespace) -> Path:
    conf = ", ".join(json.dumps(entry) for entry in args.conf)
    text = f"""data_dir = {json.dumps(str(work / "data"))}
[redis]
url = {json.dumps(url)}
[log]
dir = {json.dumps(str(work / "log"))}
level = "warning"
[metrics]
enabled = false
[pop]
concurrency = {args.concurrency}
[queues.{QUEUE}]
actions = ["archive_ingest"]
[queues.{QUEUE}.archive_ingest]
archive_root = {json.dumps(str(work / "archive"))}
master = {json.dumps(args.master)}
conf = [{conf}]
batch_size = {args.batch_size}
batch_age = {args.batch_age}
fsync = {"true" if args.fsync else "false"}
"""
    path = work / "dataq.toml"
    path.write_text(text)
    return path


async def bench(args: argparse.Namespace, work: Path) -> list[Timing]:
    redis = EmbeddedRedis(work / "redis", port=0)
    redis.start()
    try:
        settings = load_settings(write_settings(work, redis.url, args), environ={"HOME": str(work)})
        store = QueueStore.open(settings, redis.url, QUEUE)
        (action,) = load_actions(ActionContext(settings.queue(QUEUE), args.concurrency, store), settings.source)
        await action.start()
        try:
            warm = make_files(work / "src" / "warmup", WARMUP_FILES, 100)
            started = time.perf_counter()
            await through_action(action, warm, args.concurrency)
            print(f"warm-up (session start and {WARMUP_FILES} tiny files): {time.perf_counter() - started:.1f}s",
                  flush=True)
            timings = []
            for index, (case, count, size) in enumerate(QUICK_CASES if args.quick else FULL_CASES):
                records = make_files(work / "src" / f"case{index}", count, size)
                spark_seconds = await through_action(action, records, args.concurrency)
                python_seconds = plain_python(records, work / "plain" / f"case{index}", args.fsync)
                timings.append(Timing(case, count, count * size, spark_seconds, python_seconds))
                print(json.dumps(timings[-1].row()), flush=True)
                shutil.rmtree(work / "src" / f"case{index}")  # keep the peak disk use to one case
        finally:
            await action.close()
            await store.close()
    finally:
        redis.stop()
    return timings


def table(timings: list[Timing], args: argparse.Namespace) -> str:
    lines = [
        f"archive_ingest benchmark — {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"master {args.master}, batch_size {args.batch_size}, batch_age {args.batch_age}s, "
        f"concurrency {args.concurrency}, fsync {'on' if args.fsync else 'off'}",
        "",
        "| case | files | MB | Spark s | Spark files/s | Spark MB/s | Python s | Python files/s | Python MB/s "
        "| Spark time / Python time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for timing in timings:
        r = timing.row()
        lines.append(f"| {r['case']} | {r['files']} | {r['MB']} | {r['spark_s']} | {r['spark_files_s']} | "
                     f"{r['spark_MB_s']} | {r['python_s']} | {r['python_files_s']} | {r['python_MB_s']} | "
                     f"{r['spark_time_over_python']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 small and 4 large files")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--conf", action="append", default=["spark.driver.memory=1g"], help="key=value, repeatable")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--batch-age", type=float, default=0.5,
                        help="seconds (the last, partial batch of a case waits this long)")
    parser.add_argument("--concurrency", type=int, default=1000, help="records submitted at once (pop concurrency)")
    parser.add_argument("--no-fsync", dest="fsync", action="store_false")
    parser.add_argument("--workdir", default=None, help="parent of the temporary directory")
    parser.add_argument("--output", default=None, help="also write the table to this file")
    parser.add_argument("--log-level", default="warning", help="info shows each batch's phases")
    parser.add_argument("--queries", action="store_true", help="measure ls and stats on a catalog, before and "
                                                               "after compaction, instead of the ingest")
    parser.add_argument("--rows", type=int, default=1_000_000, help="the catalog's rows, with --queries")
    args = parser.parse_args()
    configure_logging(component="bench", level=args.log_level, fmt="console")
    work = Path(tempfile.mkdtemp(prefix="dataq-bench-ingest-", dir=args.workdir))
    try:
        if args.queries:
            report = catalog_queries.run(work, args.rows, args.master, args.conf)
        else:
            report = table(asyncio.run(bench(args, work)), args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(report)
    if args.output:
        Path(args.output).write_text(report + "\n")


if __name__ == "__main__":
    main()
