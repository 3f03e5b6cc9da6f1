"""What a manifest line costs ``disk_store``: its store of batches with manifests against the same store without.

Each round makes a fresh directory of ``--files`` files of ``--size`` bytes of random content and their md5 records,
then stores them in batches of ``--batch`` (``disk_store``'s default 100) with ``actions.storing.store_batch_sync``,
once keeping the manifest and once not (``[queues.NAME.disk_store] manifest = false``), into two fresh roots on
the same filesystem, the order alternating by round, each after a ``sync``. The ratio is the rate with manifests
over the rate without (goal: at least 0.95). This is the store step alone, the part the manifest changes: the pop
daemon's claims and acknowledgements around it only add the same time to both.

Run it::

    .venv/bin/python bench/manifest_cost.py [--files 10000] [--size 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataq.actions.storing import Stored, store_batch_sync
from dataq.record import Record


def make_files(directory: Path, count: int, size: int) -> list[Record]:
    directory.mkdir()
    records = []
    for n in range(count):
        data = os.urandom(size)
        path = directory / f"frame-{n:06d}.fits"
        path.write_bytes(data)
        records.append(Record(str(path), hashlib.md5(data).hexdigest(), size, pushed_at=time.time()))
    return records


def store_all(records: list[Record], root: Path, batch: int, manifest: bool) -> float:
    root.mkdir()
    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    for start in range(0, len(records), batch):
        items = [(record, f"{record.checksum[:2]}/{record.checksum}") for record in records[start:start + batch]]
        outcomes = store_batch_sync(items, str(root), keep_manifest=manifest)
        assert all(isinstance(outcome, Stored) for outcome in outcomes), outcomes
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with_manifest: list[float] = []
    without: list[float] = []
    for round_no in range(args.rounds):
        work = Path(tempfile.mkdtemp(prefix="dataq-bench-manifest-", dir=os.environ.get("TMPDIR", "/var/tmp")))
        try:
            records = make_files(work / "src", args.files, args.size)
            runs = [(with_manifest, True, work / "with"), (without, False, work / "without")]
            for times, manifest, root in runs[::-1] if round_no % 2 else runs:
                times.append(store_all(records, root, args.batch, manifest))
        finally:
            shutil.rmtree(work)
    on, off = statistics.median(with_manifest), statistics.median(without)
    print(f"disk_store's store of {args.files:,} files of {args.size:,} bytes in batches of {args.batch}, "
          f"{args.rounds} interleaved rounds, medians; {os.cpu_count()} CPUs")
    print()
    print("| manifest | seconds (each round) | files/s |")
    print("| --- | --- | ---: |")
    print(f"| kept | {on:.3f} ({', '.join(f'{t:.2f}' for t in with_manifest)}) | {args.files / on:,.0f} |")
    print(f"| not kept | {off:.3f} ({', '.join(f'{t:.2f}' for t in without)}) | {args.files / off:,.0f} |")
    print()
    print(f"rate with manifests / without: {off / on:.3f} (goal >= 0.95)")
    print("rerun: .venv/bin/python bench/manifest_cost.py "
          f"--files {args.files} --size {args.size} --batch {args.batch} --rounds {args.rounds}")


if __name__ == "__main__":
    main()
