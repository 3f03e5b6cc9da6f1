"""Where the push daemon's time goes for a feeder that waits for each reply: a cProfile of ``dataq push``.

Starts a private redis-server (``appendfsync always``) and ``dataq push`` under cProfile as a subprocess, feeds
``--records`` records (20,000) from one feeder at ``--window`` (1), stops the daemon with SIGTERM, and prints the
daemon's CPU per record and the functions with the most time of their own and the most time below them.

Run it: ``.venv/bin/python bench/push_profile.py [--records N] [--window W] [--top N]``
"""

from __future__ import annotations

import argparse
import asyncio
import io
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.push import QUEUE, cpu_seconds, lines, wait_for_port
from dataq.embedded.redis_server import EmbeddedRedis, free_port
from dataq.feed.client import Feeder


async def feed(port: int, records: int, window: int) -> float:
    feeder = Feeder("127.0.0.1", port, window=window, keep_replies=False)
    began = time.perf_counter()
    result = await feeder.feed(lines(0, records))
    if result.pushed != records:
        raise SystemExit(f"only {result.pushed} of {records} records came back Pushed")
    return records / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--top", type=int, default=35)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dataq-profile-") as tmp:
        workdir = Path(tmp)
        redis = EmbeddedRedis(workdir / "redis", port=0, appendfsync="always")
        redis.start()
        port = free_port()
        config = workdir / "dataq.toml"
        config.write_text(f'data_dir = "{workdir}"\n[redis]\nurl = "{redis.url}"\n[log]\nlevel = "warning"\n'
                          f'[metrics]\nenabled = false\n[push]\nport = {port}\n[queues.{QUEUE}]\n'
                          'max_queue_size = 10000000\n')
        profile = workdir / "push.prof"
        code = "from dataq.cli.main import main; main()"
        process = subprocess.Popen([sys.executable, "-c",
                                    f"import cProfile, sys; sys.argv = ['dataq', 'push', '--config', {str(config)!r}]; "
                                    f"cProfile.run({code!r}, {str(profile)!r})"])
        try:
            wait_for_port(port, process)
            cpu_before = cpu_seconds(process.pid)
            rate = asyncio.run(feed(port, args.records, args.window))
            cpu = (cpu_seconds(process.pid) - cpu_before) / args.records * 1e6
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
            redis.stop()
        out = io.StringIO()
        stats = pstats.Stats(str(profile), stream=out)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)
    print(f"window {args.window}: {rate:,.0f} records/s; daemon CPU {cpu:.0f} µs per record under cProfile "
          "(profiling adds its own cost: compare shares, not absolutes)\n")
    print(out.getvalue())


if __name__ == "__main__":
    main()
