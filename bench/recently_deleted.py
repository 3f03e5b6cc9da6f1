"""What creating files costs right after files were deleted on the same filesystem: the machine, not dataq.

A site that deletes its sources once they are held further on (``remove_source``) deletes files while new ones
arrive beside them. On ext4 without a journal, the kernel avoids reusing an inode freed within the last 60
seconds, or 360 while its block of the inode table is dirty, as long as that block is in the buffer cache
(``recently_deleted()`` in ``fs/ext4/ialloc.c``, asked only when the filesystem has no journal; such an inode is
taken only when its group has no other free one): each new file's inode is searched for past every inode of its
group freed in that time, so creating files where many were deleted lately costs the CPU time of that search
(``perf`` shows it as ``recently_deleted`` and ``find_get_block_common`` under ``find_inode_bit``). A journaled
ext4 (every Debian install's default) does not search. This machine's root filesystem has no journal: benchmarks
that create many files within minutes of deleting many (a test run, a previous round, a cascade's own sources and
received files, which dataq deletes and the plain tools do not) pay it.

Each round creates ``--files`` files of ``--size`` bytes in a new directory of ``--dir`` (a) before the benchmark
deleted anything, and (b) ``--after`` seconds after deleting the files of every round's (a) (not in the same
second: an inode freed in the second it is asked about does not count as recently deleted): CPU and wall seconds
of each, and whether the filesystem has a journal. (a) is only as clean as the machine's last six minutes.

Run it: ``.venv/bin/python bench/recently_deleted.py [--dir DIR] [--files 4000] [--rounds 2]``; to compare with a
journaled ext4 on the same machine (as root): ``truncate -s 8G /var/tmp/j.img && mkfs.ext4 -q -F /var/tmp/j.img
&& mount -o loop /var/tmp/j.img /mnt/j`` and ``--dir /mnt/j``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def journaled(directory: Path) -> str:
    """``yes`` or ``no`` for an ext4 with or without a journal (its jbd2 entry), else the filesystem's type (the
    question does not arise there) or ``unknown``."""
    device = os.stat(directory).st_dev
    found = None
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            major, _, minor = fields[2].partition(":")
            if (int(major), int(minor)) == (os.major(device), os.minor(device)):
                found = fields[fields.index("-") + 1], fields[fields.index("-") + 2]
    if found is None:
        return "unknown"
    kind, source = found
    if kind != "ext4":
        return f"not ext4 but {kind}"
    journals = os.listdir("/proc/fs/jbd2") if os.path.isdir("/proc/fs/jbd2") else []
    return "yes" if any(entry.startswith(f"{Path(source).name}-") for entry in journals) else "no"


def create(directory: Path, files: int, data: bytes) -> tuple[float, float]:
    """Wall and CPU seconds (this process's) to create ``files`` files of ``data`` in ``directory``."""
    directory.mkdir()
    used = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for n in range(files):
        with open(directory / f"f{n:06d}", "wb") as out:
            out.write(data)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    return wall, after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--files", type=int, default=4000)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--after", type=float, default=2.0, help="seconds between the deletions and (b)")
    args = parser.parse_args()
    data = os.urandom(args.size)
    root = Path(tempfile.mkdtemp(prefix="dataq-recently-deleted-", dir=args.dir))
    before: list[tuple[float, float]] = []
    after: list[tuple[float, float]] = []
    try:
        for round_ in range(args.rounds):
            before.append(create(root / f"before{round_}", args.files, data))
        for round_ in range(args.rounds):
            shutil.rmtree(root / f"before{round_}")
        time.sleep(args.after)
        for round_ in range(args.rounds):
            after.append(create(root / f"after{round_}", args.files, data))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"# {args.files:,} files of {args.size:,} bytes created in {args.dir} (ext4 journal: {journaled(args.dir)}), "
          f"{args.rounds} rounds, medians")
    print("| case | wall s | CPU s |\n| --- | ---: | ---: |")
    for label, runs in (("before the benchmark deleted anything", before),
                        (f"{args.after:g} s after deleting {args.rounds * args.files:,}", after)):
        wall, cpu = statistics.median(run[0] for run in runs), statistics.median(run[1] for run in runs)
        print(f"| {label} | {wall:.2f} | {cpu:.2f} |")
    print(f"\nrerun: .venv/bin/python bench/recently_deleted.py --dir {args.dir} --files {args.files} "
          f"--rounds {args.rounds} --after {args.after:g}")


if __name__ == "__main__":
    main()
