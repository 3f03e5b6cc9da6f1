"""The long chaos run: 100,000 records, at least 20 SIGKILLs of each kind (push daemon, a pop daemon,
redis-server), then the accounting of testbed/chaos.py. Prints one table; exits 1 if anything was lost.

Rerun: ``.venv/bin/python bench/chaos.py`` (``--records N --kills K`` to change the size).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.chaos import ChaosPlan, ChaosRun


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=20, help="kills of each kind")
    parser.add_argument("--seed", type=int, default=2014)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dataq-chaos-") as tmp:
        plan = ChaosPlan(records=args.records, kills_per_kind=args.kills, seed=args.seed, window=200)
        report = asyncio.run(ChaosRun(Path(tmp), plan).run())
    print("dataq chaos run: redis-server (AOF always), dataq push, 2 x dataq pop (concurrency 8),")
    print(f"marker-file action; SIGKILL at random moments; {args.records:,} lines, seed {args.seed}\n")
    print(report.table())
    print("\nPASSED" if report.passed else "\nFAILED")
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
