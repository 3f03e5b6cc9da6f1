"""Helpers of the pop daemon tests: settings files, daemons in-process and as subprocesses, test actions.

The test actions are found by import path (``tests.pop_support:MarkerAction``), so subprocess daemons need the
repository root on ``PYTHONPATH`` (:func:`daemon_env`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataq.actions import Action, NoOptions
from dataq.actions.testing import leave_mark, marks
from dataq.config import Settings, load_settings
from dataq.errors import ActionError
from dataq.ops.notices import Notice
from dataq.pop.daemon import run_pop_daemon
from dataq.record import Record
from dataq.store import QueueStore
from testbed.settings_file import toml_value, write_tables
from testbed.waits import eventually

__all__ = ["toml_value", "write_tables"]  # the settings files of these tests

REPO_ROOT = Path(__file__).resolve().parents[1]
QUEUE = "transfer"
MARKER = "mark"
"""dataq's own test action that leaves a file per run (:mod:`dataq.actions.testing`)."""
POISON = "tests.pop_support:PoisonAction"
FAIL_SOME = "tests.pop_support:FailSomeAction"
WAIT_TIMEOUT = 30.0
STARTUP_TIMEOUT = 20.0


# --- test actions --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoisonOptions:
    dir: str
    marker: str = "poison"
    """A record whose path contains this kills the daemon running it (SIGKILL, as a segfault would)."""


class PoisonAction(Action[PoisonOptions]):
    name = "poison"
    Options = PoisonOptions

    async def run(self, record: Record) -> None:
        leave_mark(self.options.dir, record)
        if self.options.marker in record.path:
            os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class FailSomeOptions:
    dir: str
    ids: tuple[str, ...] = ()
    """Records that fail; every other one succeeds."""


class FailSomeAction(Action[FailSomeOptions]):
    name = "fail_some"
    Options = FailSomeOptions

    async def run(self, record: Record) -> None:
        leave_mark(self.options.dir, record)
        if record.id in self.options.ids:
            raise ActionError(f"record {record.id} is on the fail list")


class SelfCancellingAction(Action[NoOptions]):
    """Awaits a future that something else cancels, as a buggy library might: CancelledError leaves run()."""

    name = "self_cancelling"
    Options = NoOptions

    async def run(self, record: Record) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.cancel()
        await future


SELF_CANCELLING = "tests.pop_support:SelfCancellingAction"


class NowhereAction(Action[NoOptions]):
    """Succeeds, but cannot say where it sends a record: a plugin whose ``destination`` has a bug."""

    name = "nowhere"
    Options = NoOptions

    async def run(self, record: Record) -> None:
        return None

    def destination(self, record: Record) -> str | None:
        raise RuntimeError("this plugin forgot to set its host")


NOWHERE = "tests.pop_support:NowhereAction"


def executions(marker_dir: Path) -> list[str]:
    """Record ids in the order their executions started."""
    return marks(marker_dir)


def runs_by_id(marker_dir: Path) -> dict[str, int]:
    return dict(Counter(marks(marker_dir)))


# --- settings ------------------------------------------------------------------------------------------------


def write_config(
    tmp_path: Path,
    redis_url: str,
    *,
    actions: Sequence[str] = ("echo",),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    queue: Mapping[str, Any] | None = None,
    pop: Mapping[str, Any] | None = None,
    log_level: str = "info",
    activities: Mapping[str, Mapping[str, Any]] | None = None,
    push: Mapping[str, Any] | None = None,
) -> Path:
    """A settings file for fast tests: heartbeat every 0.2 s with a 1 s TTL, sweeps every 0.2 s."""
    pop_table = {"concurrency": 4, "heartbeat_interval": 0.2, "heartbeat_ttl": 1.0, "sweep_interval": 0.2,
                 "grace_period": 5.0, **(pop or {})}
    lines = [
        f"data_dir = {toml_value(str(tmp_path / 'data'))}",
        "[redis]",
        f"url = {toml_value(redis_url)}",
        "[log]",
        f"dir = {toml_value(str(tmp_path / 'log'))}",
        f"level = {toml_value(log_level)}",
        'format = "json"',
        "[pop]",
        *(f"{key} = {toml_value(value)}" for key, value in pop_table.items()),
        f"[queues.{QUEUE}]",
        f"actions = {toml_value(list(actions))}",
        *(f"{key} = {toml_value(value)}" for key, value in (queue or {}).items()),
    ]
    for action, table in (options or {}).items():
        lines.append(f"[queues.{QUEUE}.{toml_value(action)}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
    for activity, table in (activities or {}).items():
        lines.append(f"[queues.{QUEUE}.activities.{activity}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
    if push is not None:
        lines.append("[push]")
        lines += [f"{key} = {toml_value(value)}" for key, value in push.items()]
    path = tmp_path / "dataq.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load(path: Path) -> Settings:
    return load_settings(path, environ={"HOME": str(path.parent)})


# --- waiting -------------------------------------------------------------------------------------------------


async def counter(store: QueueStore, name: str) -> int:
    return (await store.counters()).get(name, 0)


# --- in-process daemons --------------------------------------------------------------------------------------


@dataclass
class RecordingNotifier:
    """A notifier that keeps every notice posted to it."""

    notices: list[Notice] = field(default_factory=list)

    def post(self, notice: Notice) -> None:
        self.notices.append(notice)


@dataclass
class InProcessDaemon:
    task: asyncio.Task[int]
    stop: asyncio.Event
    worker_id: str

    async def shut_down(self) -> int:
        self.stop.set()
        return await self.task


@contextlib.asynccontextmanager
async def pop_daemon(
    settings: Settings, *, concurrency: int | None = None, notifier: RecordingNotifier | None = None
) -> AsyncIterator[InProcessDaemon]:
    """A pop daemon in this event loop, registered when entered; stopped (SIGTERM-like) on exit."""
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        run_pop_daemon(settings, QUEUE, concurrency=concurrency, stop=stop, ready=ready.set_result, notifier=notifier)
    )
    try:
        done, _ = await asyncio.wait({task, ready}, timeout=STARTUP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
            raise AssertionError(f"the pop daemon exited at start-up with {task.result()}")
        if ready not in done:
            raise AssertionError("the pop daemon did not register in time")
        yield InProcessDaemon(task, stop, ready.result())
    finally:
        stop.set()
        if not task.done():
            await asyncio.wait_for(task, WAIT_TIMEOUT)


# --- subprocess daemons --------------------------------------------------------------------------------------


def daemon_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DATAQ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


class PopProcess:
    """``dataq pop --config FILE`` as a child process."""

    def __init__(self, config: Path, *extra: str, tmp: Path | None = None) -> None:
        """``tmp``: the daemon's own temporary directory (``TMPDIR``), away from other tests' daemons."""
        self.config = config
        self.stderr_path = config.parent / f"pop-{time.monotonic_ns()}.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 (closed in wait/kill)
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from dataq.cli.main import main; main()", "pop", "--config", str(config), *extra],
            env=daemon_env() if tmp is None else {**daemon_env(), "TMPDIR": str(tmp)},
            cwd="/",
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    async def registered(self, store: QueueStore, timeout: float = STARTUP_TIMEOUT) -> str:
        """Wait until this process's worker is in the registry; returns its worker id."""
        found: list[str] = []

        async def check() -> bool:
            if not self.alive():
                raise AssertionError(f"pop daemon exited with {self.process.returncode}: {self.stderr()}")
            found[:] = [w.worker_id for w in await store.workers() if w.info.get("pid") == self.pid]
            return bool(found)

        await eventually(check, timeout=timeout, what=f"pop daemon {self.pid} to register")
        return found[0]

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def wait(self, timeout: float = WAIT_TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                raise AssertionError(f"pop daemon {self.pid} did not exit within {timeout}s")
            await asyncio.sleep(0.02)
        self._stderr.close()
        return self.process.returncode

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait()
        self._stderr.close()

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-4000:]


@contextlib.contextmanager
def processes() -> Any:
    """Collects PopProcess children and kills any still running at exit."""
    started: list[PopProcess] = []
    try:
        yield started
    finally:
        for child in started:
            child.kill()
