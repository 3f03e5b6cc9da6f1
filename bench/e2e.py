"""End to end: feeders -> ``dataq push`` -> Redis (AOF, fsync always) -> ``dataq pop`` (no-op action) -> done.

A private redis-server (embedded, ``appendfsync always``, temporary directory), ``dataq push`` and
``--pop-daemons`` x ``dataq pop`` (concurrency 64, action ``noop``, log level warning) run as subprocesses on
loopback; the feeders (2, window 1,000 each) are asyncio tasks of this process sending unique records.

Phase 1, maximum rate, for ``--seconds``: end-to-end records/s = growth of the ``done`` counter / the window;
push rate = ``Pushed`` replies / the window. If the active list (pushed, not claimed) grew, pop is the slower
side, else push is; pop's rate draining the backlog afterwards and each process's CPU say more about why.

Phase 2, moderate load: the feeders are paced at half the phase-1 end-to-end rate (an async generator yields
the records due every ~10 ms). Each ``Pushed`` reply's arrival is stamped ``time.time()`` (``on_reply``); then
every event since the phase's start is read back from the queue's event stream. A ``done`` event's time is
its stream id's millisecond part, stamped by redis-server when the ack script ran (the event's detail holds
only the action's duration, nothing finer): latency = done time - reply time has 1 ms resolution, biased
down by up to 1 ms. It can be negative and is reported as it is, never clamped: a record is claimable as soon
as the push script has run, so pop may claim, run and acknowledge it before the push daemon's reply has been
fsynced, sent and read by the feeder. Two more rows split the path on Redis's clock: ``pushed`` event ->
``done`` event (the queue itself) and ``pushed`` event -> ``Pushed`` reply (fsync, reply, feeder).

    .venv/bin/python bench/e2e.py [--seconds N] [--quick]    # --quick: 10 s phases (default 30 s)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from dataq.embedded.redis_server import EmbeddedRedis, free_port
from dataq.feed.client import Feeder
from dataq.protocol import Reply, ReplyKind
from dataq.store import QueueStore

QUEUE = "e2e"
EVENTS_MAX_LEN = 10_000_000  # 3 events a record (pushed, claimed, done); phase 2 reads only its own
STARTUP_TIMEOUT = 30.0
DRAIN_TIMEOUT = 600.0
TICK = 0.01
EVENT_CHUNK = 10_000
RERUN = ".venv/bin/python bench/e2e.py [--seconds N] [--quick]"


def line(n: int) -> bytes:
    """A record line shaped like the 2014 seed's data; its id is ``%032x`` of ``n``."""
    return b"/noao-tuc-z1/mtn/20140708/ct15m/smarts/c15e_140708_%09d_ori.fits.fz %032x %d\n" % (n, n, 9922 + n)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def write_config(workdir: Path, redis_url: str, port: int, concurrency: int) -> Path:
    config = workdir / "dataq.toml"
    config.write_text(
        f'data_dir = "{workdir}"\n[redis]\nurl = "{redis_url}"\n[log]\ndir = "{workdir / "log"}"\nlevel = "warning"\n'
        f'format = "json"\n[metrics]\nenabled = false\n[push]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[pop]\nconcurrency = {concurrency}\ngrace_period = 5.0\n[events]\nmax_len = {EVENTS_MAX_LEN}\n"
        f'[queues.{QUEUE}]\nactions = ["noop"]\nmax_queue_size = 100000000\n'
    )
    return config


def spawn(workdir: Path, config: Path, role: str, index: int) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DATAQ_")}
    with open(workdir / f"{role}-{index}.stderr", "wb") as stderr:
        return subprocess.Popen([sys.executable, "-c", "from dataq.cli.main import main; main()", role, "--config",
                                 str(config)], env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=stderr,
                                start_new_session=True)  # Ctrl-C reaches the bench only; it stops them in order


def stop_all(children: list[subprocess.Popen[bytes]]) -> None:
    """Pop daemons first, then the push daemon (SIGTERM; SIGKILL after 15 s, or at once on a second Ctrl-C)."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        except KeyboardInterrupt:
            for other in children:
                other.kill()
            raise


async def wait_until(condition: Callable[[], Awaitable[bool]], within: float, what: str,
                     children: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + within
    while not await condition():
        if any(child.poll() is not None for child in children):
            raise SystemExit(f"a daemon exited early while waiting for {what}; see its *.stderr file")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


def percentile(ordered: list[float], p: float) -> float:
    """Nearest-rank percentile of an ordered list."""
    return ordered[max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))]


async def phase1(store: QueueStore, port: int, ids: Iterator[int], args: argparse.Namespace,
                 pids: dict[str, list[int]]) -> dict[str, Any]:
    stopped = False

    def endless() -> Iterator[bytes]:
        for n in ids:
            if stopped:
                return
            yield line(n)

    feeders = [Feeder("127.0.0.1", port, window=args.window, keep_replies=False) for _ in range(args.feeders)]
    cpu_before = {role: sum(map(cpu_seconds, ps)) for role, ps in pids.items()}
    began = time.perf_counter()
    tasks = [asyncio.create_task(feeder.feed(endless())) for feeder in feeders]
    samples: list[tuple[float, int, int, int]] = []  # (t, pushed, done, active), once a second
    for second in range(1, args.seconds + 1):
        await asyncio.sleep(max(0.0, began + second - time.perf_counter()))
        summary = await store.summary()
        samples.append((time.perf_counter() - began, sum(f.result.pushed for f in feeders),
                        summary.counters.get("done", 0), summary.active))
    cpu = {f"cpu_{role}": (sum(map(cpu_seconds, ps)) - cpu_before[role]) / samples[-1][0] * 100
           for role, ps in pids.items()}
    stopped = True
    total = sum(result.pushed for result in await asyncio.gather(*tasks))
    drain_began, done_at_stop = time.perf_counter(), (await store.counters()).get("done", 0)

    async def drained() -> bool:
        return (await store.counters()).get("done", 0) >= total

    memory = (await store.client.info("memory"))["used_memory_human"]
    await wait_until(drained, DRAIN_TIMEOUT, "the queue to drain after phase 1", [])
    drain = time.perf_counter() - drain_began
    elapsed, pushed, done, active = samples[-1]
    per_second = [b[2] - a[2] for a, b in itertools.pairwise([(0.0, 0, 0, 0), *samples])]
    return {"elapsed": elapsed, "pushed": pushed, "done": done, "active": active,
            "active_max": max(s[3] for s in samples), "push_rate": pushed / elapsed, "rate": done / elapsed,
            "sec_min": min(per_second), "sec_med": statistics.median(per_second), "sec_max": max(per_second),
            "drain": drain, "drain_rate": (total - done_at_stop) / drain, "memory": memory, **cpu}


async def phase2(store: QueueStore, port: int, ids: Iterator[int], args: argparse.Namespace,
                 target: float, done_before: int) -> dict[str, Any]:
    last = await store.events(1)
    start_id = last[-1].event_id if last else "0-0"
    pushed_at: dict[str, float] = {}

    def on_reply(_index: int, reply: Reply) -> None:
        if reply.kind is ReplyKind.PUSHED:
            pushed_at[reply.detail] = time.time()

    async def paced(rate: float) -> AsyncIterator[bytes]:
        began, sent = time.monotonic(), 0
        while (now := time.monotonic()) - began < args.seconds:
            due = int((now - began) * rate)
            for _ in range(due - sent):
                yield line(next(ids))
            sent = due
            await asyncio.sleep(TICK)

    feeders = [Feeder("127.0.0.1", port, window=args.window, keep_replies=False, on_reply=on_reply)
               for _ in range(args.feeders)]
    began = time.perf_counter()
    results = await asyncio.gather(*(feeder.feed(paced(target / args.feeders)) for feeder in feeders))
    elapsed = time.perf_counter() - began
    total = sum(result.pushed for result in results)

    async def drained() -> bool:
        return (await store.counters()).get("done", 0) >= done_before + total

    await wait_until(drained, DRAIN_TIMEOUT, "the queue to drain after phase 2", [])
    pushed_ms: dict[str, int] = {}
    done_ms: dict[str, int] = {}
    while events := await store.events_after(start_id, count=EVENT_CHUNK):
        start_id = events[-1].event_id
        for event in events:
            if event.kind in ("pushed", "done"):
                (pushed_ms if event.kind == "pushed" else done_ms)[event.record_id] = int(event.event_id.split("-")[0])
    rows = {
        "Pushed reply -> done event": [done_ms[i] / 1000 - t for i, t in pushed_at.items() if i in done_ms],
        "pushed event -> done event": [(done_ms[i] - p) / 1000 for i, p in pushed_ms.items() if i in done_ms],
        "pushed event -> Pushed reply": [t - pushed_ms[i] / 1000 for i, t in pushed_at.items() if i in pushed_ms],
    }
    return {"elapsed": elapsed, "pushed": total, "missing": len(set(pushed_at) - set(done_ms)),
            "rows": {name: sorted(values) for name, values in rows.items()}}


async def run(args: argparse.Namespace) -> None:
    load_before = load()
    children: list[subprocess.Popen[bytes]] = []
    with (tempfile.TemporaryDirectory(prefix="dataq-e2e-") as tmp,
          EmbeddedRedis(Path(tmp) / "redis", port=0, appendfsync="always") as redis):
        store = QueueStore.from_url(redis.url, QUEUE, events_max_len=EVENTS_MAX_LEN)
        try:
            version = (await store.client.info("server"))["redis_version"]
            fsync = str((await store.client.config_get("appendfsync"))["appendfsync"])
            port = free_port()
            config = write_config(Path(tmp), redis.url, port, args.concurrency)
            children += [spawn(Path(tmp), config, "pop", i) for i in range(args.pop_daemons)]
            children.append(spawn(Path(tmp), config, "push", 0))

            async def up() -> bool:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return bool(len(await store.workers()) >= args.pop_daemons)
                return False

            await wait_until(up, STARTUP_TIMEOUT, "the daemons to start", children)
            assert redis.pid is not None
            pids = {"push": [children[-1].pid], "pop": [c.pid for c in children[:-1]], "redis": [redis.pid],
                    "bench": [os.getpid()]}
            ids = itertools.count()
            print(f"phase 1: maximum rate for {args.seconds} s ...", file=sys.stderr)
            one = await phase1(store, port, ids, args, pids)
            target = one["rate"] / 2
            print(f"phase 2: {target:,.0f} records/s for {args.seconds} s ...", file=sys.stderr)
            two = await phase2(store, port, ids, args, target, (await store.counters()).get("done", 0))
        finally:
            stop_all(children)  # before redis stops (leaving the with block)
            await store.close()
    report(args, one, two, target, version, fsync, load_before)


def report(args: argparse.Namespace, one: dict[str, Any], two: dict[str, Any], target: float, version: str,
           fsync: str, load_before: str) -> None:
    model = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        model = next((x.split(":", 1)[1].strip() for x in cpuinfo if x.startswith("model name")), model)
    print(f"\ndataq end-to-end benchmark: {args.feeders} feeder(s) x window {args.window:,} -> dataq push -> "
          f"redis -> {args.pop_daemons} x dataq pop (concurrency {args.concurrency}, action noop) -> done")
    print(f"machine: {os.cpu_count()} CPUs ({model}), Linux {platform.release()}, Python {platform.python_version()}")
    print(f"load average (1, 5, 15 min): {load_before} before, {load()} after (other work on the host skews rates)")
    print(f"redis-server {version}, private, loopback TCP, AOF on, appendfsync {fsync}, no RDB; events max_len "
          f"{EVENTS_MAX_LEN:,}; daemons are subprocesses, feeders are tasks of the bench process")
    print(f"rerun: {RERUN}\n")
    backlog = one["active"] > max(1000, one["pushed"] / 100)
    side = ("pop (the active list grew: push outran it)" if backlog
            else "push (pop kept the active list near empty)")
    if backlog and one["drain_rate"] > 1.5 * one["rate"]:
        side += (f"; yet pop alone drained the backlog at {one['drain_rate']:,.0f}/s "
                 f"({one['drain_rate'] / one['rate']:.1f}x its rate while push ran): held back by push, not slow")
    print(f"phase 1, maximum rate ({one['elapsed']:.1f} s window, unique records, fed without pause)\n")
    print(f"| {'metric':<44} | {'value':>28} |\n|{'-' * 46}|{'-' * 29}:|")
    cpu = " / ".join(f"{one[f'cpu_{role}']:.0f}" for role in ("push", "pop", "redis", "bench"))
    for name, value in (
        ("end to end, records done/s", f"{one['rate']:,.0f}"),
        ("push, Pushed replies/s", f"{one['push_rate']:,.0f}"),
        ("done/s in 1-s intervals: min / median / max", f"{one['sec_min']:,} / {one['sec_med']:,.0f} / "
                                                         f"{one['sec_max']:,}"),
        ("records pushed / done in the window", f"{one['pushed']:,} / {one['done']:,}"),
        ("active list at the end (max sampled)", f"{one['active']:,} ({one['active_max']:,})"),
        ("redis used_memory when the feeders stopped", one["memory"]),
        ("drain after the window: seconds, records/s", f"{one['drain']:.1f} s, {one['drain_rate']:,.0f}/s"),
        ("CPU % of a core: push / pop / redis / bench", cpu),
    ):
        print(f"| {name:<44} | {value:>28} |")
    print(f"\nslower side: {side}")
    print(f"\nphase 2, moderate load: target {target:,.0f} records/s (half of phase 1), achieved "
          f"{two['pushed'] / two['elapsed']:,.0f} Pushed/s over {two['elapsed']:.1f} s; "
          f"{two['missing']} pushed record(s) without a done event")
    print("latency in ms; event times are stream-id milliseconds (1 ms resolution), replies time.time()\n")
    print(f"| {'path':<30} | {'p50':>7} | {'p90':>7} | {'p99':>7} | {'max':>8} | {'records':>8} | {'< 0':>6} |")
    print(f"|{'-' * 32}|{'-' * 8}:|{'-' * 8}:|{'-' * 8}:|{'-' * 9}:|{'-' * 9}:|{'-' * 7}:|")
    for name, values in two["rows"].items():
        if not values:
            print(f"| {name:<30} | no records measured |")
            continue
        ms = [percentile(values, p) * 1000 for p in (50, 90, 99)]
        print(f"| {name:<30} | {ms[0]:>7.1f} | {ms[1]:>7.1f} | {ms[2]:>7.1f} | {values[-1] * 1000:>8.1f} | "
              f"{len(values):>8,} | {sum(v < 0 for v in values):>6,} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=None, help="length of each phase (default 30)")
    parser.add_argument("--quick", action="store_true", help="10 s phases")
    parser.add_argument("--feeders", type=int, default=2, help="feeder connections (default 2)")
    parser.add_argument("--window", type=int, default=1000, help="records in flight per feeder (default 1,000)")
    parser.add_argument("--pop-daemons", type=int, default=1, help="pop daemons (default 1)")
    parser.add_argument("--concurrency", type=int, default=64, help="records run at once per pop daemon")
    args = parser.parse_args()
    args.seconds = args.seconds or (10 if args.quick else 30)
    run_cleanly(run(args))


def run_cleanly(main: Coroutine[Any, Any, None]) -> None:
    """Run a benchmark's ``main``; SIGTERM or Ctrl-C stops it, and the processes it started, cleanly."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill cleans up like Ctrl-C does
    try:
        asyncio.run(main)
    except KeyboardInterrupt:
        raise SystemExit("interrupted; every process the bench started was stopped") from None


if __name__ == "__main__":
    main()
