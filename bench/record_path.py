"""The record path against the commit before done ids were remembered: what remembering them costs now.

Custody (issue 35) made every push look each id up among the done ids remembered for ``remember_done``, and every
acknowledgement write it. This bench measures the record path of this tree and of an older commit (by default
``299034d``, the last before remembered ids) in the same run, rounds interleaved and each round's order swapped,
each side running its own code: the older commit is extracted with ``git archive`` into a temporary directory
and put first on ``PYTHONPATH`` (the same virtualenv serves both; the daemons are subprocesses of that side).

Measured per side and round, each against a fresh redis-server fsyncing every write (``bench/record_path_probe.py``):

* ``push_batch`` by 1,000, one batch at a time and two in flight (the store alone, ``bench/store.py``'s loop);
* ``dataq push`` fed by 4 feeders at window 1,000 (``bench/push.py``'s cell);
* ``dataq pop`` draining a pre-filled queue with the noop action: one daemon at concurrency 256, two at 64
  (``bench/pop.py``'s rows).

The goal (issue 53): each at least 0.9 of the older commit's rate. Medians of the rounds, and every round's ratio.
A third side runs this tree with ``remember_done = 0``: how much of the gap remembering done ids makes, and how
much everything else added since the older commit.

Rerun: ``.venv/bin/python bench/record_path.py [--rounds 3] [--base 299034d] [--store-records 50000]
[--push-records 40000] [--pop-records 50000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "record_path_probe.py"
BASE = "299034d"
"""The last commit before done ids were remembered (issue 35's ``b2ea56d`` follows it)."""
MEASUREMENTS = (("store", "push_batch by 1,000"), ("store2", "push_batch by 1,000, 2 in flight"),
                ("push", "dataq push, 4 feeders at window 1,000"), ("pop1", "dataq pop, 1 daemon at 256"),
                ("pop2", "dataq pop, 2 daemons at 64"))


def extract(commit: str, into: Path) -> None:
    """The tree of ``commit`` as files (not a worktree: nothing of the repository changes)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    # Where setup.cfg's package_dir puts them, so that the tree's own are imported, not the installed tree's.
    for package in ("cli", "actions"):
        (into / "dataq" / package).symlink_to(into / package, target_is_directory=True)
    # Byte-compiled once, as installing it would: the daemons start from its sources on every run.
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(into / name) for name in ("dataq", "cli",
                                                                                            "actions"))],
                   check=True, stdout=subprocess.DEVNULL)


def probe(tree: Path, kind: str, records: int, *, forget: bool = False) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "DATAQ_BENCH_FORGET": "1" if forget else "0"}
    done = subprocess.run([sys.executable, str(PROBE), kind, str(records)], env=env, cwd=tree, check=True,
                          capture_output=True, text=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default=BASE, help=f"the older commit (default {BASE})")
    parser.add_argument("--store-records", type=int, default=50_000)
    parser.add_argument("--push-records", type=int, default=40_000)
    parser.add_argument("--pop-records", type=int, default=50_000)
    parser.add_argument("--only", nargs="+", choices=[kind for kind, _ in MEASUREMENTS],
                        help="measure only these")
    args = parser.parse_args()
    records = {"store": args.store_records, "store2": args.store_records, "push": args.push_records,
               "pop1": args.pop_records, "pop2": args.pop_records}
    kinds = [kind for kind, _ in MEASUREMENTS if not args.only or kind in args.only]
    load_before = os.getloadavg()[0]
    rates: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="dataq-base-") as temp:
        base = Path(temp)
        extract(args.base, base)
        sides = {"base": base, "now": ROOT, "forgetting": ROOT}
        for round_ in range(args.rounds):
            order = ["base", "forgetting", "now"] if round_ % 2 == 0 else ["now", "forgetting", "base"]
            for kind in kinds:
                for side in order:
                    result = probe(sides[side], kind, records[kind], forget=side == "forgetting")
                    rates.setdefault((kind, side), []).append(result["rate"])
                    if "daemon_cpu_us" in result:
                        cpu.setdefault((kind, side), []).append((result["daemon_cpu_us"], result["redis_cpu_us"]))
                ratio = rates[kind, "now"][-1] / rates[kind, "base"][-1]
                print(f"round {round_ + 1}: {kind}: {args.base} {rates[kind, 'base'][-1]:,.0f}/s, now "
                      f"{rates[kind, 'now'][-1]:,.0f}/s (remembering nothing {rates[kind, 'forgetting'][-1]:,.0f}/s), "
                      f"ratio {ratio:.2f}", file=sys.stderr)
    what = " (the commit before remembered ids)" if args.base == BASE else ""
    print(f"record path against {args.base}{what}, {args.rounds} rounds interleaved; "
          f"{os.cpu_count()} CPUs, load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print(f"| measurement | {args.base} records/s | now records/s | ratio (goal ≥ 0.9) | per round | "
          "now with `remember_done = 0`: records/s, ratio | CPU µs/record daemon / redis: before, now, "
          "remembering nothing |")
    print("| --- | ---: | ---: | ---: | --- | ---: | --- |")
    for kind, label in MEASUREMENTS:
        if kind not in kinds:
            continue
        before, now, forgetting = rates[kind, "base"], rates[kind, "now"], rates[kind, "forgetting"]
        ratios = [b / a for a, b in zip(before, now, strict=True)]
        without = statistics.median(b / a for a, b in zip(before, forgetting, strict=True))
        costs = ""
        if (kind, "now") in cpu:
            costs = "; ".join(
                f"{statistics.median(c[0] for c in cpu[kind, side]):.1f} / "
                f"{statistics.median(c[1] for c in cpu[kind, side]):.1f}" for side in ("base", "now", "forgetting"))
        print(f"| {label} ({records[kind]:,} records) | {statistics.median(before):,.0f} | "
              f"{statistics.median(now):,.0f} | **{statistics.median(ratios):.2f}** | "
              f"{', '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(forgetting):,.0f}, {without:.2f} | "
              f"{costs} |")
    print(f"\nrerun: .venv/bin/python bench/record_path.py --rounds {args.rounds} --base {args.base}")


if __name__ == "__main__":
    main()
