"""One measurement of the record path, run by ``bench/record_path.py`` inside the tree it measures.

It imports ``dataq`` and the ``bench`` helpers from whatever tree comes first on ``PYTHONPATH`` (this commit's, or
an older commit's extracted by the driver), so the same measurement runs each tree's own code; it prints one JSON
object: ``{"rate": records/s, "daemon_cpu_us": ..., "redis_cpu_us": ...}`` (CPU per record where measured).

Run alone: ``PYTHONPATH=TREE .venv/bin/python bench/record_path_probe.py KIND RECORDS`` with KIND one of
``store``, ``store2`` (two batches in flight), ``push``, ``pop1`` (one daemon at concurrency 256) and ``pop2``
(two at 64). With ``DATAQ_BENCH_FORGET=1`` (this tree only) the queue remembers no done ids
(``remember_done = 0``): what remembering them costs, apart from everything else since the older commit.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.pop import run_scenario, write_config
from bench.push import measure, push_daemon
from bench.store import push_rate
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.store import QueueStore

FORGET = os.environ.get("DATAQ_BENCH_FORGET") == "1"
"""Measure with ``remember_done = 0`` (an older tree has no such setting: never set for it)."""
POP_SCENARIOS = {"pop1": (1, 256), "pop2": (2, 64)}
"""KIND -> (daemons, concurrency of each): the rows of ``bench/pop.py`` the record path's goal names."""


async def store_rate(directory: Path, records: int, in_flight: int) -> dict[str, Any]:
    """``push_batch`` by 1,000 against a fresh fsyncing server, ``in_flight`` batches at Redis at once."""
    with EmbeddedRedis(directory, port=0, appendfsync="always") as server:
        store = QueueStore.from_url(server.url, "bench", **({"remember_done": 0} if FORGET else {}))
        try:
            return {"rate": await push_rate(store, 1000, records, 0, in_flight=in_flight)}
        finally:
            await store.close()


async def push_rate_of_daemon(directory: Path, records: int) -> dict[str, Any]:
    """``dataq push`` fed by 4 feeders at window 1,000."""
    server = EmbeddedRedis(directory / "redis", port=0, appendfsync="always")
    server.start()
    try:
        assert server.pid is not None
        with push_daemon(directory, server.url, **({"queue_extra": "remember_done = 0\n"} if FORGET else {})) as (
                port, daemon_pid):
            cell = await measure(port, (daemon_pid, server.pid), 1000, 4, 0, records)
        return {"rate": cell.rate, "daemon_cpu_us": cell.cpu[0], "redis_cpu_us": cell.cpu[1]}
    finally:
        server.stop()


async def pop_rate(directory: Path, records: int, kind: str) -> dict[str, Any]:
    """``dataq pop`` draining a pre-filled queue with the noop action."""
    daemons, concurrency = POP_SCENARIOS[kind]
    with EmbeddedRedis(directory / "redis", port=0, appendfsync="always") as server:
        config = write_config(directory, server.url)
        if FORGET:  # the queue's table comes last
            config.write_text(config.read_text() + "remember_done = 0\n")
        store = QueueStore.from_url(server.url, "bench")
        try:
            assert server.pid is not None
            result = await run_scenario(store, config, server.pid, kind, daemons, concurrency, records)
        finally:
            await store.close()
    return {"rate": result.rate, "daemon_cpu_us": result.daemon_cpu_us, "redis_cpu_us": result.redis_cpu_us}


async def main(kind: str, records: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dataq-record-path-") as temp:
        directory = Path(temp)
        if kind in ("store", "store2"):
            result = await store_rate(directory, records, 2 if kind == "store2" else 1)
        elif kind == "push":
            result = await push_rate_of_daemon(directory, records)
        else:
            result = await pop_rate(directory, records, kind)
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
