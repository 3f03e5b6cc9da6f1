"""The chaos harness: the real suite (redis-server with AOF always, ``dataq push``, two ``dataq pop``) fed by
feeders with duplicates and malformed lines while SIGKILLs hit every process at random moments.

Used by ``tests/e2e/test_chaos.py`` (short) and ``bench/chaos.py`` (long). What it proves, at the end:

* every record that was acknowledged (``Pushed``, or ``Ignored`` because already tracked) ran at least once and
  is no longer queued, or is inactive with a reason;
* no record ran twice unless the worker running it was killed (the harness freezes a pop daemon with SIGSTOP
  and notes what it holds before the SIGKILL, so every legitimate re-run is accounted for);
* no ``Ignored`` for an id that had never been sent, and no ``Error:`` for a valid line;
* the queue's lists and its records hash agree.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from dataq.actions.testing import marks
from dataq.embedded.redis_server import EmbeddedRedis, free_port
from dataq.errors import StoreUnavailable
from dataq.feed.client import Feeder
from dataq.protocol import ReplyKind
from dataq.store import QueueStore

QUEUE = "transfer"

DRAIN_TIMEOUT = 120.0

T = TypeVar("T")


def checksum_of(n: int) -> str:
    return hashlib.md5(str(n).encode()).hexdigest()


def daemon_env() -> dict[str, str]:
    """This process's environment without its ``DATAQ_*`` overrides: the daemons read the run's settings file."""
    return {key: value for key, value in os.environ.items() if not key.startswith("DATAQ_")}


async def retrying(call: Callable[[], Awaitable[T]], attempts: int = 50) -> T:
    """The harness's own reads, through Redis restarts (a connection that Redis closed fails once)."""
    for _ in range(attempts - 1):
        try:
            return await call()
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    return await call()


@dataclass
class ChaosPlan:
    records: int = 3000
    kills_per_kind: int = 2
    feeders: int = 2
    window: int = 50
    duplicate_share: float = 0.10
    malformed_share: float = 0.01
    action_seconds: float = 0.02
    concurrency: int = 8
    seed: int = 2014


@dataclass
class ChaosReport:
    fed_lines: int = 0
    valid_ids: int = 0
    acknowledged: int = 0
    executed: int = 0
    re_executed_after_kill: int = 0
    unexplained_re_executions: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    inactive: int = 0
    errors_for_valid_lines: int = 0
    ignored_never_sent: int = 0
    malformed_accepted: int = 0
    inconsistencies: list[str] = field(default_factory=list)
    kills: dict[str, int] = field(default_factory=lambda: {"push": 0, "pop": 0, "redis": 0})
    seconds: float = 0.0

    def table(self) -> str:
        rows = [
            ("lines fed (with duplicates and malformed)", self.fed_lines),
            ("distinct valid records", self.valid_ids),
            ("acknowledged (Pushed or Ignored)", self.acknowledged),
            ("executed at least once", self.executed),
            ("re-executed after their worker was killed", self.re_executed_after_kill),
            ("re-executed without a kill (must be 0)", len(self.unexplained_re_executions)),
            ("inactive (with a reason)", self.inactive),
            ("LOST (must be 0)", len(self.lost)),
            ("Error for a valid line (must be 0)", self.errors_for_valid_lines),
            ("Ignored for an id never sent (must be 0)", self.ignored_never_sent),
            ("malformed lines accepted (must be 0)", self.malformed_accepted),
            ("store inconsistencies (must be 0)", len(self.inconsistencies)),
            *((f"kills of {kind}", count) for kind, count in self.kills.items()),
            ("seconds", round(self.seconds, 1)),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)

    @property
    def passed(self) -> bool:
        return not (self.lost or self.unexplained_re_executions or self.errors_for_valid_lines
                    or self.ignored_never_sent or self.malformed_accepted or self.inconsistencies)


class Daemon:
    """``dataq push|pop --config FILE`` as a child process that the chaos loop kills and restarts."""

    def __init__(self, command: str, config: Path, python: Path | None = None) -> None:
        """``python``: another dataq's interpreter (:mod:`testbed.older`), run isolated from ours; None: ours."""
        self.command, self.config = command, config
        self.interpreter = [sys.executable] if python is None else [str(python), "-I"]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.config.parent / f"{self.command}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*self.interpreter, "-c", "from dataq.cli.main import main; main()", self.command, "--config",
             str(self.config)],
            env=daemon_env(), cwd="/", stdout=subprocess.DEVNULL, stderr=log,
        )
        log.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self, timeout: float = 30.0) -> None:
        self.signal(signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def make_lines(plan: ChaosPlan, rng: random.Random) -> tuple[list[list[str]], dict[str, str]]:
    """Per feeder, its lines; plus id -> the valid line for it. Duplicates repeat earlier ids (of any feeder)."""
    valid: dict[str, str] = {}
    lines: list[list[str]] = [[] for _ in range(plan.feeders)]
    issued: list[str] = []
    for n in range(plan.records):
        feeder = n % plan.feeders
        roll = rng.random()
        if roll < plan.malformed_share:
            lines[feeder].append(rng.choice([f"relative/path/{n} {checksum_of(n)} 10", f"/data/{n} NOTHEX 10",
                                             f"/data/{n} {checksum_of(n)} -5", '{"path": 1}', f"/data/{n} only-two"]))
        elif roll < plan.malformed_share + plan.duplicate_share and issued:
            lines[feeder].append(valid[rng.choice(issued)])
        else:
            record_id = checksum_of(n)
            valid[record_id] = f"/chaos/night/{n:07d}.fits {record_id} {1000 + n}"
            issued.append(record_id)
            lines[feeder].append(valid[record_id])
    return lines, valid


async def consistency_problems(store: QueueStore) -> list[str]:
    """Every tracked id in exactly one place; lists, the delayed set and the records hash agree."""
    k, r = store.keys, store.r
    places: list[str] = []
    places += await r.lrange(k.active, 0, -1)
    places += await r.lrange(k.inactive, 0, -1)
    places += await r.zrange(k.delayed, 0, -1)
    for worker in await r.hkeys(k.workers):
        places += await r.lrange(k.processing(worker), 0, -1)
    tracked = set(await r.hkeys(k.records))
    problems = []
    if len(places) != len(set(places)):
        problems.append("an id is in two places")
    if set(places) != tracked:
        problems.append(f"records hash and lists disagree: {sorted(set(places) ^ tracked)[:5]}")
    return problems


class ChaosRun:
    def __init__(self, workdir: Path, plan: ChaosPlan) -> None:
        self.workdir, self.plan = workdir, plan
        self.rng = random.Random(plan.seed)
        self.redis = EmbeddedRedis(workdir / "redis", port=0)
        self.markers = workdir / "markers"
        self.report = ChaosReport()
        self.held_at_kill: Counter[str] = Counter()
        self.pushed: Counter[str] = Counter()
        self.resent: Counter[str] = Counter()
        self.port = free_port()

    def _config(self) -> Path:
        self.markers.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "dataq.toml"
        path.write_text(f"""\
data_dir = "{self.workdir / 'data'}"
[redis]
url = "{self.redis.url}"
[log]
dir = "{self.workdir / 'log'}"
level = "warning"
format = "json"
[metrics]
enabled = false
[pop]
concurrency = {self.plan.concurrency}
# The TTL is long next to a Redis restart, so no live worker looks dead after one; a killed one is given up
# after 3 s.
heartbeat_interval = 0.3
heartbeat_ttl = 3.0
sweep_interval = 0.3
max_crashes = 10
[queues.{QUEUE}]
actions = ["mark"]
push_port = {self.port}
max_errors = 0
[queues.{QUEUE}.mark]
dir = "{self.markers}"
seconds = {self.plan.action_seconds}
""", encoding="utf-8")
        return path

    async def run(self) -> ChaosReport:
        started = time.monotonic()
        self.redis.start()
        config = self._config()
        store = QueueStore.from_url(self.redis.url, QUEUE)
        push = Daemon("push", config)
        pops = [Daemon("pop", config), Daemon("pop", config)]
        daemons = [push, *pops]
        for daemon in daemons:
            daemon.start()
        try:
            lines, valid = make_lines(self.plan, self.rng)
            self.report.fed_lines = sum(len(f) for f in lines)
            self.report.valid_ids = len(valid)
            feeders = [Feeder("127.0.0.1", self.port, window=self.plan.window, retry_for=120.0) for _ in lines]
            feeding = asyncio.gather(*(f.feed(chunk) for f, chunk in zip(feeders, lines, strict=True)))
            chaos = asyncio.create_task(self._chaos(store, push, pops))
            results = await feeding
            await chaos
            await self._drain(store)
            for daemon in daemons:
                daemon.stop()
            self._judge(lines, valid, results)
            inactive = await retrying(lambda: store.r.lrange(store.keys.inactive, 0, -1))
            self.report.inactive = len(inactive)
            self.report.inconsistencies = await retrying(lambda: consistency_problems(store))
            self._judge_executions(inactive)
        finally:
            for daemon in daemons:
                daemon.kill()
            await store.close()
            self.redis.stop()
        self.report.seconds = time.monotonic() - started
        return self.report

    async def _chaos(self, store: QueueStore, push: Daemon, pops: list[Daemon]) -> None:
        kinds = [kind for kind in ("push", "pop", "redis") for _ in range(self.plan.kills_per_kind)]
        self.rng.shuffle(kinds)
        await asyncio.sleep(1.0)
        for kind in kinds:
            await asyncio.sleep(self.rng.uniform(0.2, 1.0))
            if kind == "redis":
                self.redis.kill()
                await asyncio.sleep(self.rng.uniform(0.05, 0.5))
                self.redis.start()
            elif kind == "push":
                push.kill()
                push.start()
            else:
                await self._kill_pop(store, self.rng.choice(pops))
            self.report.kills[kind] += 1

    async def _kill_pop(self, store: QueueStore, pop: Daemon) -> None:
        # Frozen, it claims nothing more: what its processing list holds now is exactly what the kill interrupts.
        pop.signal(signal.SIGSTOP)
        try:
            workers = [w.worker_id for w in await retrying(store.workers) if w.info.get("pid") == pop.pid]
            for worker in workers:
                self.held_at_kill.update(await retrying(lambda w=worker: store.processing(w)))
        finally:
            pop.kill()
            pop.start()

    async def _drain(self, store: QueueStore) -> None:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            summary = await retrying(store.summary)
            if summary.tracked == summary.inactive:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"queue did not drain: {await store.summary()}")

    def _judge(self, lines: list[list[str]], valid: dict[str, str], results: list[object]) -> None:
        valid_lines = set(valid.values())
        pushed: set[str] = set()
        ignored: dict[str, bool] = {}
        """Ids answered Ignored -> whether a feeder that sent it reconnected (so may have resent it)."""
        self.acknowledged = set()
        for feeder_lines, result in zip(lines, results, strict=True):
            reconnected = result.reconnects > 0  # type: ignore[attr-defined]
            for line, reply in zip(feeder_lines, result.replies, strict=True):  # type: ignore[attr-defined]
                if line not in valid_lines:
                    if reply.kind is not ReplyKind.ERROR:
                        self.report.malformed_accepted += 1
                    continue
                record_id = line.split()[1]
                if reply.kind is ReplyKind.ERROR:
                    self.report.errors_for_valid_lines += 1
                    continue
                self.acknowledged.add(record_id)
                if reconnected:
                    self.resent[record_id] += 1
                if reply.kind is ReplyKind.PUSHED:
                    pushed.add(record_id)
                    self.pushed[record_id] += 1
                else:
                    ignored[record_id] = ignored.get(record_id, False) or reconnected
        # Ignored means "already tracked": someone must have pushed it, or a resend found its own first try.
        self.report.ignored_never_sent = sum(
            1 for record_id, resent in ignored.items() if record_id not in pushed and not resent
        )
        self.report.acknowledged = len(self.acknowledged)

    def _judge_executions(self, inactive: list[str]) -> None:
        """Each ``Pushed`` enqueued the record anew (a duplicate sent after the first copy was done is new work,
        as in the 2014 design), so it must run at least that often, and more only when a kill interrupted it or
        a feeder resent it after a lost reply."""
        runs = Counter(marks(self.markers))
        parked = set(inactive)
        self.report.executed = len(runs)
        self.report.lost = sorted(
            i for i in self.acknowledged if runs.get(i, 0) + (i in parked) < max(1, self.pushed[i])
        )
        extra = {i: n - self.pushed[i] for i, n in runs.items() if n > max(1, self.pushed[i])}
        self.report.re_executed_after_kill = sum(1 for i in extra if self.held_at_kill[i])
        self.report.unexplained_re_executions = sorted(
            i for i, n in extra.items() if n > self.held_at_kill[i] + self.resent[i]
        )
