"""How closely ``network_move``'s ``bandwidth`` holds, against plain ``rsync --bwlimit`` at the same rate.

Per rate (``--rates``, MiB/s) and round, in turn (the order alternating by round): ``network_move`` with
``bandwidth = "<rate>M"`` sends ``--files`` fresh files of ``--seconds`` × rate / files bytes each to an rsync daemon
on loopback (the files go as batches side by side, so the limit is split over the calls open), and plain
``rsync --bwlimit`` sends the same bytes as one file. Each prints the achieved rate over the limit (goal: within
±15 %) as the median of the rounds.

Run it::

    .venv/bin/python bench/bandwidth.py [--rates 1 4 16] [--seconds 4] [--files 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manifest_cost import make_files  # this folder's: a tree of random files and their records

from dataq.actions.network_move import NetworkMoveAction
from dataq.actions.registry import load_actions
from dataq.config import QueueSettings
from dataq.record import Record
from testbed.actions import action_context, run_side_by_side
from testbed.rsync import rsync_daemon

MIB = 1024 ** 2


async def dataq_once(url: str, records: list[Record], rate: int) -> float:
    queue = QueueSettings("transfer", actions=("network_move",), action_options={"network_move": {
        "destination": url, "bandwidth": f"{rate}M", "batch_size": 1}})
    (action,) = load_actions(action_context(queue))
    assert isinstance(action, NetworkMoveAction)
    return await run_side_by_side(action, records)


def rsync_once(url: str, path: Path, rate: int) -> float:
    started = time.perf_counter()
    subprocess.run(["rsync", f"--bwlimit={rate * 1024}", str(path), url], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dataq-bench-bandwidth-", dir=os.environ.get("TMPDIR", "/var/tmp")))
    rows = []
    try:
        with rsync_daemon(work / "rsyncd", {"valley": work / "valley"}) as daemon:
            for rate in args.rates:
                total = int(rate * MIB * args.seconds)
                ours, plain = [], []
                for round_no in range(args.rounds):
                    shutil.rmtree(work / "valley", ignore_errors=True)
                    (work / "valley").mkdir()
                    records = make_files(work / f"night-{rate}-{round_no}", args.files, total // args.files)
                    single = work / f"one-{rate}-{round_no}.bin"
                    single.write_bytes(os.urandom(total))
                    for which in ("plain", "ours") if round_no % 2 else ("ours", "plain"):
                        if which == "ours":
                            ours.append(asyncio.run(dataq_once(daemon.url("valley"), records, rate)))
                        else:
                            plain.append(rsync_once(daemon.url("valley", "plain"), single, rate))
                expected = total / (rate * MIB)
                rows.append((rate, total, expected, statistics.median(ours), statistics.median(plain)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"bandwidth benchmark: {args.rounds} interleaved rounds, medians; {args.files} files per run "
          f"(network_move, batches of 1 side by side) against one file (rsync); load {os.getloadavg()[0]:.2f}")
    print()
    print("| limit MiB/s | MiB | time at the limit s | network_move s | rate / limit | rsync --bwlimit s | "
          "rate / limit |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for rate, total, expected, ours_s, plain_s in rows:
        print(f"| {rate} | {total / MIB:.0f} | {expected:.2f} | {ours_s:.2f} | **{expected / ours_s:.2f}** | "
              f"{plain_s:.2f} | {expected / plain_s:.2f} |")
    print()
    print(f"rerun: .venv/bin/python bench/bandwidth.py --rates {' '.join(map(str, args.rates))} "
          f"--seconds {args.seconds:g} --files {args.files} --rounds {args.rounds}")


if __name__ == "__main__":
    main()
