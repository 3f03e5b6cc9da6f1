"""The whole path of a file move as a user meets it, for ``bench/move.py --whole`` (see its docstring).

Per scenario and round: a fresh directory of files (``bench.move.make_files``), ``md5sum`` of them, a wait until
the last was written more than a second before (a scan finds files at rest: their feeder sends their identity,
:mod:`dataq.file_identity`, and the action need not read them again; ``bench/lsyncd.py`` measures files just
written), then in alternating order, each after a ``sync``: the plain tool; dataq with its default settings; and,
with ``--concurrency N``, dataq with ``[pop] concurrency = N`` (the "tuned" column). A dataq run writes one
settings file (``testbed.settings_file``) for a queue of its own: the private Redis, the log (level warning, in the
work directory), the push daemon's loopback port, metrics on free ports, the queue's action and its destination
(and ``checksum = ALGO`` with ``--checksum``, ``source_check = "read"`` with ``--source-check read``: every source
hashed again by its action, as before file identities), nothing else. It starts ``dataq push`` and ``dataq pop`` on
it (``bench.e2e.spawn``) and waits until the push daemon accepts connections and the pop daemon listens on the
queue's work channel; then the clock starts, ``dataq feed --config FILE --scan SRC`` runs (it hashes every file and
sends its records to the push daemon), and the clock stops when the queue's ``done`` counter reaches the file count
(polled every 5 ms; a record inactive, a daemon exiting or the feed failing ends the bench). The feed must then
report every record pushed, and every file must be at its destination, intact. ``feed exited s``: when the feed
exited (every record answered ``Pushed``), on the same clock, in the default run.

``ceiling`` = tool / (tool + k * hash / CPUs), k the passes of the queue's checksum the whole path needs: the
feed's (the action proves a settled file by its identity: ``network_move`` reads it only for a ``sha256`` queue,
``disk_store`` copies it with XXH3-128 alone and reads the copy back with it, left out); ``hash`` is ``md5sum`` of
the files, or with ``--checksum`` dataq's own hashing of them with that algorithm on one thread. With
``--checksum`` other than md5 the stored files, named by that checksum, are found by their content.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.e2e import spawn, stop_all
from bench.lsyncd import tree_cpu
from bench.move import (
    BASELINE,
    LARGE_BYTES,
    LOOPBACK,
    SMALL_BYTES,
    Scenario,
    check_arrived,
    in_rounds,
    in_turn,
    make_files,
    rsync_daemon,
    timed,
    verified_copy,
    version_of_rsync,
)
from bench.pop import POLL, RUN_TIMEOUT, STARTUP_TIMEOUT, wait_for
from bench.push import dataq_command
from dataq.checksum import hash_file
from dataq.config.schema import PopSettings
from dataq.embedded.redis_server import free_port
from dataq.file_identity import SETTLED_NS
from dataq.record import Record
from dataq.store import QueueStore
from testbed.settings_file import write_tables

DEFAULT_CONCURRENCY = PopSettings().concurrency
QUEUE_KEYS: dict[str, str] = {}
"""More keys of the queue's table (``--source-check read``)."""
TOOLS = {"network_move": "one `rsync -a --checksum` to an rsync daemon",
         "disk_store": "by hand: `cp -r`, `sync`, the copies' cached pages dropped, `md5sum -c` on every CPU"}
PLAIN_COPY = "`cp -r` + `sync` (checking nothing)"
RERUN = ".venv/bin/python bench/move.py --whole [--only network_move|disk_store] [--rounds N] [--concurrency N] " \
        "[--checksum ALGO] [--rsyncd-nodelay] [--rsyncd-max-connections N] [--source-check read] [--plain-copy]"
MARKS = {"first pushed": ("pushed", 1), "all pushed": ("pushed", 0), "first done": ("done", 1)}
"""Moments of a run: a queue counter and the count it reaches then (0: every record)."""


@dataclass
class RunLog:
    """What dataq's runs of a scenario saw besides their time (:func:`through_whole_path`)."""

    fed: list[float] = field(default_factory=list)
    """Seconds until ``dataq feed`` exited (every record pushed)."""
    cpu: list[dict[str, float]] = field(default_factory=list)
    """CPU seconds by process name: ``feed``, ``pop`` and ``push``, with their children once reaped, and ``rsync``
    (the rsync daemon, with its receivers; a pop daemon's rsync still running at a reading would count there too,
    but none runs at either: before the feed, and once every record is done)."""
    marks: list[dict[str, float]] = field(default_factory=list)
    """Seconds from the feed's start to each of :data:`MARKS`."""


@dataclass
class WholeScenario(Scenario):
    concurrency: int | None = None
    checksum: str | None = None
    tuned: list[float] = field(default_factory=list)
    runs: RunLog = field(default_factory=RunLog)
    """What the default runs saw besides their time."""

    def passes(self) -> int:
        # The feed hashes every file before it sends its record; the action proves a settled file by its identity.
        return 1 + ((self.checksum == "sha256" and self.action == "network_move") or "source_check" in QUEUE_KEYS)

    def row(self) -> str:
        tool, dataq, md5sum = (statistics.median(values) for values in (self.tool, self.dataq, self.md5sum))
        megabytes = self.count * self.size / 1e6
        tuned = ""
        if self.concurrency is not None:
            seconds = statistics.median(self.tuned)
            tuned = f" {seconds:.2f} | **{tool / seconds:.2f}** | {self.count / seconds:,.0f} |"
        return (f"| feed --scan → {self.action} | {self.label} | {self.count:,} | {megabytes:,.0f} | {tool:.2f} | "
                f"{dataq:.2f} | **{tool / dataq:.2f}** | {self.ceiling(tool, md5sum):.2f} | {self.count / dataq:,.0f} "
                f"| {megabytes / dataq:,.0f} | {statistics.median(self.runs.fed):.2f} |{tuned}")

    def cpu_row(self) -> str:
        """Where the CPUs went in the default runs (medians): a run that takes about its CPU seconds over the
        CPUs is bound by them."""
        used = {role: statistics.median(run.get(role, 0.0) for run in self.runs.cpu)
                for role in ("feed", "pop", "push", "rsync")}
        total = statistics.median(sum(run.values()) for run in self.runs.cpu)
        marks = {mark: statistics.median(run[mark] for run in self.runs.marks) for mark in MARKS}
        return (f"| feed --scan → {self.action} | {self.label} | {statistics.median(self.dataq):.2f} | "
                f"{used['feed']:.2f} | {used['pop']:.2f} | {used['push']:.2f} | {used['rsync']:.2f} | "
                f"{total / (os.cpu_count() or 1):.2f} | " + " | ".join(f"{marks[mark]:.2f}" for mark in MARKS) + " |")


def write_config(work: Path, url: str, queue: str, port: int, action: str, options: dict[str, Any],
                 concurrency: int | None, checksum: str | None) -> Path:
    """dataq's defaults but for where things are: Redis, the log, the push port, the action's destination."""
    tables: dict[str, dict[str, Any]] = {
        "redis": {"url": url},
        "log": {"dir": str(work / "log"), "level": "warning", "format": "json"},
        "metrics": {"push_port": 0, "pop_port": 0},  # on, as by default, on free ports
        "push": {"host": LOOPBACK, "port": port},
    }
    if concurrency is not None:
        tables["pop"] = {"concurrency": concurrency}
    tables[f"queues.{queue}"] = {"actions": [action], **({"checksum": checksum} if checksum else {}), **QUEUE_KEYS}
    tables[f"queues.{queue}.{action}"] = options
    return write_tables(work / f"{queue}.toml", work / "data", tables)


async def through_whole_path(url: str, work: Path, queue: str, action: str, options: dict[str, Any],
                             count: int, concurrency: int | None, checksum: str | None, log: RunLog,
                             far: int | None) -> float:
    """Seconds from the start of ``dataq feed --scan`` until ``count`` records are done (daemons already up);
    logs in ``log`` the seconds until the feed exited, when the queue's counters first showed records pushed and
    done (:data:`MARKS`), and the CPU seconds the feed, the pop daemon
    (its rsync and copying children included), the push daemon and the rsync daemon ``far`` (its receivers and
    the verifying reads of what they wrote) used meanwhile."""
    home = work / queue  # its settings, log and daemons' stderr
    home.mkdir()
    port = free_port()
    config = write_config(home, url, queue, port, action, options, concurrency, checksum)
    store = QueueStore.from_url(url, queue)
    children = {role: spawn(home, config, role, 0) for role in ("pop", "push")}
    feed: asyncio.subprocess.Process | None = None

    def exited() -> None:
        for role, child in children.items():
            if child.poll() is not None:
                stderr = (home / f"{role}-0.stderr").read_text(errors="replace")[-2000:]
                raise SystemExit(f"dataq {role} ({queue}) exited with {child.returncode}: {stderr}")

    try:
        async def up() -> bool:
            exited()
            try:
                socket.create_connection((LOOPBACK, port), timeout=0.2).close()
            except OSError:
                return False
            ((_, listening),) = await store.r.pubsub_numsub(store.keys.work)  # the pop daemon only
            return listening == 1

        await wait_for(up, STARTUP_TIMEOUT, f"dataq push and pop ({queue}) to start")
        env = {key: value for key, value in os.environ.items() if not key.startswith("DATAQ_")}
        leaders = [children["pop"].pid, children["push"].pid, *([far] if far else [])]
        cpu_before, reaped_before = tree_cpu(leaders), _reaped_cpu()
        started = time.perf_counter()
        feed = await asyncio.create_subprocess_exec(
            *dataq_command(), "feed", "--config", str(config), "--scan", str(work / "src"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        replies = asyncio.create_task(feed.communicate())
        replies.add_done_callback(lambda _: log.fed.append(time.perf_counter() - started))
        marks: dict[str, float] = {}

        async def drained() -> bool:
            exited()
            if replies.done() and feed.returncode:
                raise SystemExit(f"dataq feed ({queue}) failed: {replies.result()[1].decode()}")
            counters = await store.counters()
            for mark, (counter, at_least) in MARKS.items():
                if counters.get(counter, 0) >= (at_least or count):
                    marks.setdefault(mark, time.perf_counter() - started)
            if counters.get("inactive", 0) or (await store.summary()).inactive:
                raise SystemExit(f"{action}: records failed: {await store.summary()}")
            return counters.get("done", 0) >= count

        await wait_for(drained, RUN_TIMEOUT, f"{action} ({queue}) to finish")
        elapsed = time.perf_counter() - started
        cpu_after = tree_cpu(leaders)
        out, err = await asyncio.wait_for(replies, 60)
        # The feed is the only child reaped meanwhile: the daemons run on, the plain tools run apart.
        log.marks.append(marks)
        log.cpu.append({"feed": _reaped_cpu() - reaped_before,
                        **{role: cpu_after.get(role, 0.0) - cpu_before.get(role, 0.0) for role in cpu_after}})
        if feed.returncode or not out.decode().startswith(f"pushed {count}, ignored 0, errors 0"):
            raise SystemExit(f"dataq feed ({queue}): status {feed.returncode}: {out.decode()}{err.decode()}")
        return elapsed
    finally:
        if feed is not None and feed.returncode is None:
            feed.kill()  # the bench is failing
        await asyncio.to_thread(stop_all, list(children.values()))
        await store.close()


def _reaped_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def check_contents(records: list[Record], where: Path) -> None:
    """Every file under ``where`` by content (md5), whatever it is named: for ids of another checksum."""
    present = {hashlib.md5(path.read_bytes()).hexdigest() for path in where.rglob("*") if path.is_file()}
    missing = [record.path for record in records if record.checksum not in present]
    if missing:
        raise SystemExit(f"{len(missing)} file(s) did not arrive intact under {where}, first {missing[0]}")


def hashed_in(algorithm: str, paths: list[str]) -> float:
    """Seconds to hash ``paths`` with ``algorithm`` on one thread (dataq's own hashing)."""
    started = time.perf_counter()
    for path in paths:
        hash_file(path, algorithm)
    return time.perf_counter() - started


async def whole_round(scenario: WholeScenario, work: Path, url: str, round_no: int, checksum: str | None) -> None:
    records = make_files(work / "src", scenario.count, scenario.size)
    written = time.time()
    if checksum in (None, "md5"):
        scenario.md5sum.append(await asyncio.to_thread(timed, ["md5sum", *(record.path for record in records)]))
    else:  # the queue's algorithm, timed on one core as md5sum is
        scenario.md5sum.append(await asyncio.to_thread(hashed_in, checksum, [record.path for record in records]))
    await asyncio.sleep(max(0.0, written + SETTLED_NS / 1e9 + 0.1 - time.time()))
    variants = [("dq", None, scenario.dataq, scenario.runs)]
    if scenario.concurrency is not None:
        variants.append((f"dq-c{scenario.concurrency}", scenario.concurrency, scenario.tuned, RunLog()))
    daemon = None
    if scenario.action == "network_move":
        daemon = rsync_daemon(work)
        daemon.start()
        plain = ["rsync", "-a", "--checksum", f"{work / 'src'}/", daemon.url("m", "plain")]
        destinations = {name: work / "module" / name for name, *_ in variants}
        options = {name: {"destination": daemon.url("m", name)} for name in destinations}

        def tool() -> float:
            return timed(plain)
    else:
        destinations = {name: work / name for name, *_ in variants}
        for where in destinations.values():
            where.mkdir()
        options = {name: {"root": str(where)} for name, where in destinations.items()}

        def tool() -> float:
            return verified_copy(work / "src", work / "copy", records, check=not BASELINE["plain_copy"])

    def run(name: str, concurrency: int | None, log: RunLog) -> Callable[[], Awaitable[float]]:
        queue = f"{scenario.action}{round_no}{scenario.size}{name.replace('-', '')}"
        return lambda: through_whole_path(url, work, queue, scenario.action, options[name], scenario.count,
                                          concurrency, checksum, log,
                                          daemon.process.pid if daemon and daemon.process else None)

    try:
        await in_turn(round_no, [(scenario.tool, lambda: asyncio.to_thread(tool)),
                                 *((times, run(name, concurrency, log)) for name, concurrency, times, log in variants)],
                      (work, scenario.count * scenario.size))
    finally:
        if daemon is not None:
            daemon.stop()
    for where in destinations.values():
        if checksum in (None, "md5") or scenario.action == "network_move":
            check_arrived(records, where, by_checksum=scenario.action == "disk_store")
        else:
            check_contents(records, where)


async def run_whole(args: argparse.Namespace, actions: list[str]) -> None:
    if args.source_check:
        QUEUE_KEYS["source_check"] = args.source_check
    scenarios = [WholeScenario(action, label, count, size, [], [], [], concurrency=args.concurrency,
                               checksum=args.checksum)
                 for action in actions for label, count, size in (("small files", args.small, SMALL_BYTES),
                                                                  ("large files", args.large, LARGE_BYTES))
                 if count > 0]  # --small 0 or --large 0: that kind of file is left out
    if not scenarios:
        raise SystemExit("nothing to measure: --small and --large are both 0")
    load_before = os.getloadavg()[0]
    await in_rounds(scenarios, args.rounds, "dataq-bench-whole-",
                    lambda scenario, work, url, round_no: whole_round(scenario, work, url, round_no, args.checksum))
    rsync_version = await asyncio.to_thread(version_of_rsync)
    print(f"dataq whole-path move benchmark: dataq feed --scan -> dataq push -> redis (appendfsync always) -> "
          f"dataq pop -> done; {args.rounds} round(s), medians; default settings ([pop] concurrency unset, "
          f"default {DEFAULT_CONCURRENCY})" + (f", tuned: concurrency {args.concurrency}" if args.concurrency else "")
          + (f"; checksum {args.checksum}" if args.checksum else "")
          + (f"; source_check {args.source_check}" if args.source_check else "")
          + f"; {os.cpu_count()} CPUs, Python {platform.python_version()}; {rsync_version.strip()}")
    tools = {**TOOLS, **({"disk_store": PLAIN_COPY} if BASELINE["plain_copy"] else {})}
    print(f"plain tools: {'; '.join(f'{action}: {tools[action]}' for action in actions)}"
          + ("; rsync daemon with socket options = TCP_NODELAY" if args.rsyncd_nodelay else "")
          + (f"; rsync daemon with max connections = {args.rsyncd_max_connections}"
             if args.rsyncd_max_connections else ""))
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print()
    tuned = (f" dataq c{args.concurrency} s | ratio c{args.concurrency} | files/s c{args.concurrency} |"
             if args.concurrency else "")
    print("| path | files | count | MB | plain tool s | dataq s | ratio | ceiling | dataq files/s | dataq MB/s | "
          "feed exited s |" + tuned)
    print("| --- | --- |" + " ---: |" * (12 if tuned else 9))
    for scenario in scenarios:
        print(scenario.row())
    print()
    print(f"CPU seconds of the default runs (medians; the pop daemon's include its rsync or copying children; "
          f"Redis's left out), their sum over the {os.cpu_count()} CPUs, and when the queue's counters first showed "
          f"records pushed and done (seconds from the feed's start, polled every {POLL * 1000:.0f} ms):")
    print()
    print("| path | files | dataq s | feed CPU s | pop CPU s | push CPU s | rsync daemon CPU s | all CPU s / CPUs | "
          + " | ".join(f"{mark} s" for mark in MARKS) + " |")
    print("| --- | --- |" + " ---: |" * (6 + len(MARKS)))
    for scenario in scenarios:
        print(scenario.cpu_row())
    print()
    print(f"rerun: {RERUN}")
