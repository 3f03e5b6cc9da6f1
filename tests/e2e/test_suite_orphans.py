"""``dataq run`` leaves no orphan behind: not when it is SIGKILLed, not when a second stop signal forces its exit.

Its push daemon, pop daemon and embedded redis-server are its children. An orphan would hold the data directory's
lock and the push port, so the next ``dataq run`` would attach to a server it does not own, or restart a push daemon
that cannot bind forever. Each test therefore ends by starting a new ``dataq run`` with the same settings and
feeding it.

Every process is real and listens on loopback only. The tests record the pid (and start time) of every process
they cause to run, and SIGKILL whatever of it still runs at teardown. While a test runs, pytest is a child
subreaper: what a dead ``dataq run`` leaves behind becomes pytest's child (not init's), to be seen ending and reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from dataq.actions import Action
from dataq.embedded.redis_server import LOCK_FILE, find_running, free_port
from dataq.feed.client import Feeder
from dataq.record import Record
from dataq.runtime.signals import FORCED_EXIT_STATUS
from dataq.store import QueueStore
from testbed.waits import eventually
from tests.e2e.test_suite import DATAQ, stop_suite, suite_config, summary_when
from tests.helpers import make_records
from tests.pop_support import daemon_env

GONE_TIMEOUT = 60.0
"""Seconds a process gets to be gone. Generous: a SIGTERMed pop daemon whose Redis went away at the same moment
retries Redis for ``shutdown_redis_wait`` (2 s in :func:`suite_config`) after its grace period before it exits."""
START_TIMEOUT = 30.0
FED = 20
HELD = f"{__name__}:HeldAction"
"""How the daemons under test import :class:`HeldAction`: by path, from this very module."""
HOLD_FILE = "hold"
LONG_GRACE = 600.0
"""A pop daemon's grace period far beyond any deadline here: a held daemon that is only asked to stop outlives it."""


# --- a pop daemon that cannot drain --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeldOptions:
    dir: str
    """``started-<record id>`` is created here per execution, which then lasts as long as ``<dir>/hold`` exists."""


class HeldAction(Action[HeldOptions]):
    """Keeps its records until the test lets go, so that a pop daemon asked to stop (SIGTERM) waits out its grace
    period: only SIGKILL ends it at once. Defined here, imported by path by the daemons under test."""

    name = "held"
    Options = HeldOptions

    async def run(self, record: Record) -> None:
        Path(self.options.dir, f"started-{record.id}").touch()
        while Path(self.options.dir, HOLD_FILE).exists():
            await asyncio.sleep(0.05)


# --- processes -----------------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat from the state on (the command name before it may hold anything)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rpartition(")")[2].split()


def _state(pid: int) -> str | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return next((line.split()[1] for line in lines if line.startswith("State:")), None)


def parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and parent_of(int(entry.name)) == pid:
            found.append(int(entry.name))
    return found


@dataclass(frozen=True)
class Started:
    """A process a test caused to run; its start time tells it apart from a later process given the same pid."""

    name: str
    pid: int
    start_time: str

    @classmethod
    def of(cls, name: str, pid: int) -> Started:
        fields = _stat(pid)
        assert fields is not None, f"{name} (pid {pid}) is not running"
        return cls(name, pid, fields[19])

    def gone(self) -> bool:
        """Exited; a zombie counts, since init in a container may never reap what it inherits."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        fields = _stat(self.pid)
        return fields is None or fields[19] != self.start_time or _state(self.pid) in (None, "Z", "X")

    def kill(self) -> None:
        if not self.gone():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def __str__(self) -> str:
        return f"{self.name} (pid {self.pid})"


PR_SET_CHILD_SUBREAPER = 36
"""From <linux/prctl.h>."""


def adopt_orphans(on: bool) -> None:
    """Make this process the one that inherits its orphaned descendants (instead of init), so that a test can
    collect how a daemon whose runner is gone ended."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@dataclass
class Launched:
    """The ``dataq run`` processes of a test, and every process they were seen to start."""

    tmp_path: Path
    suites: list[subprocess.Popen[bytes]] = field(default_factory=list)
    processes: list[Started] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)

    def dataq_run(self, config: Path, *, stderr_pipe: bool = False) -> subprocess.Popen[bytes]:
        """``dataq run --config CONFIG``; its stderr goes to a file unless ``stderr_pipe`` (for ``stop_suite``).

        A file, because the daemons inherit it: after a SIGKILL a pipe nobody reads could block a survivor, and
        closing it would make a survivor die of EPIPE, hiding the very orphan a test looks for.
        """
        env = {**daemon_env(), "HOME": str(self.tmp_path)}
        if stderr_pipe:
            stderr: int | IO[bytes] = subprocess.PIPE
        else:
            stderr = open(self.tmp_path / f"run-{len(self.suites)}.stderr", "wb")  # noqa: SIM115 (closed at teardown)
            self._logs.append(stderr)
        suite = subprocess.Popen([*DATAQ, "run", "--config", str(config)], env=env, stderr=stderr)
        self.suites.append(suite)
        return suite

    def track(self, name: str, pid: int) -> Started:
        started = Started.of(name, pid)
        self.processes.append(started)
        return started

    def stderr_of(self, suite: subprocess.Popen[bytes]) -> str:
        path = self.tmp_path / f"run-{self.suites.index(suite)}.stderr"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(stderr not kept)"

    def clean_up(self) -> None:
        for suite in self.suites:
            if suite.poll() is None:
                # Its children now, before killing it orphans them (a daemon it restarted was never tracked).
                for pid in children_of(suite.pid):
                    with contextlib.suppress(AssertionError):
                        self.track("child of dataq run", pid)
                suite.kill()
            suite.wait()
        for process in self.processes:
            process.kill()
            # Adopted ones are this process's children now: reaped, or they would stay zombies until pytest ends.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(process.pid, 0)
        for log in self._logs:
            log.close()


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[Launched]:
    adopt_orphans(True)
    processes = Launched(tmp_path)
    try:
        yield processes
    finally:
        try:
            processes.clean_up()
        finally:
            adopt_orphans(False)


def exit_status(process: Started) -> int | None:
    """How an adopted (see :func:`adopt_orphans`) process that has exited ended, as ``Popen.returncode`` says it;
    None when it is not this process's child."""
    try:
        pid, status = os.waitpid(process.pid, os.WNOHANG)
    except ChildProcessError:
        return None
    assert pid == process.pid, f"{process} is still running"
    return os.waitstatus_to_exitcode(status)


async def all_gone(processes: Sequence[Started], what: str) -> None:
    async def gone() -> bool:
        return all(process.gone() for process in processes)

    try:
        await eventually(gone, timeout=GONE_TIMEOUT, what=what)
    except AssertionError as exc:
        alive = ", ".join(str(process) for process in processes if not process.gone())
        raise AssertionError(f"{exc}; still running: {alive}") from None


async def exited(suite: subprocess.Popen[bytes]) -> int:
    async def done() -> bool:
        return suite.poll() is not None

    await eventually(done, timeout=GONE_TIMEOUT, what=f"dataq run (pid {suite.pid}) to exit")
    assert suite.returncode is not None
    return suite.returncode


# --- the suite -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    """A ``dataq run`` that serves: its embedded Redis and the daemons it started (its children, by /proc)."""

    process: subprocess.Popen[bytes]
    url: str
    redis: Started
    push: Started
    pop: Started

    @property
    def children(self) -> list[Started]:
        return [self.redis, self.push, self.pop]


def lock_info(data_dir: Path) -> dict[str, str]:
    pairs = (line.partition("=") for line in (data_dir / LOCK_FILE).read_text().splitlines())
    return {key: value for key, sep, value in pairs if sep}


async def serving(launched: Launched, suite: subprocess.Popen[bytes], data_dir: Path) -> Suite:
    """Wait until ``suite`` has its embedded Redis up and both daemons registered; learn their pids."""
    url_box: list[str] = []

    async def redis_up() -> bool:
        assert suite.poll() is None, f"dataq run exited with {suite.returncode}: {launched.stderr_of(suite)}"
        url = find_running(data_dir)
        url_box[:] = [url] if url else []
        return url is not None

    await eventually(redis_up, timeout=START_TIMEOUT, what="the embedded redis-server")
    redis = launched.track("redis-server", int(lock_info(data_dir)["pid"]))
    daemons: dict[str, int] = {}
    store = QueueStore.from_url(url_box[0], "transfer")
    try:
        async def registered() -> bool:
            assert suite.poll() is None, f"dataq run exited with {suite.returncode}: {launched.stderr_of(suite)}"
            # The registry outlives daemons that never unregistered (killed ones): only this run's children count.
            daemons.clear()
            for worker in await store.workers():
                pid = int(str(worker.info["pid"]))
                if worker.heartbeat is not None and parent_of(pid) == suite.pid:
                    daemons[str(worker.info["role"])] = pid
            return set(daemons) == {"push", "pop"}

        await eventually(registered, timeout=START_TIMEOUT, what="the push and pop daemons of dataq run")
    finally:
        await store.close()
    return Suite(suite, url_box[0], redis, launched.track("push daemon", daemons["push"]),
                 launched.track("pop daemon", daemons["pop"]))


async def feed(port: int, count: int, start: int) -> None:
    # A push daemon registers only once it listens: a refusal means it does not serve, so fail well before the
    # default minute of retrying.
    result = await Feeder("127.0.0.1", port, window=10, retry_for=10).feed(make_records(count, start=start))
    assert (result.pushed, result.ignored, result.errors) == (count, 0, 0)


def the_children_at_the_end(launched: Launched, suite: Suite) -> list[Started]:
    """Every child of ``suite`` right before it is ended: the three it should have, and anything else."""
    pids = set(children_of(suite.process.pid))
    assert {child.pid for child in suite.children} <= pids, "the daemons and redis-server must be children of dataq run"
    known = {child.pid for child in suite.children}
    return [*suite.children, *(launched.track("child of dataq run", pid) for pid in pids - known)]


async def a_new_run_starts_cleanly(
    launched: Launched, config: Path, port: int, data_dir: Path, before: Suite, *, done_at_least: int
) -> None:
    """A second ``dataq run`` with the same settings owns a redis-server of its own and serves feeders."""
    again = await serving(launched, launched.dataq_run(config, stderr_pipe=True), data_dir)
    # Its own server, not the previous run's attached to: the lock names the new run as owner.
    assert again.redis.pid != before.redis.pid
    assert lock_info(data_dir)["owner"] == str(again.process.pid)
    assert parent_of(again.redis.pid) == again.process.pid
    store = QueueStore.from_url(again.url, "transfer")
    try:
        pushed_before = (await store.counters()).get("pushed", 0)
        await feed(port, FED, start=1000)
        assert (await store.counters()).get("pushed", 0) - pushed_before == FED
        await summary_when(store, done_at_least + FED)
        # Only this run's: a killed daemon's heartbeat may still be in the AOF, alive for its TTL.
        pushes = [w for w in await store.workers()
                  if w.info["role"] == "push" and parent_of(int(str(w.info["pid"]))) == again.process.pid]
        # The push daemon that took the records is the first one started: it bound the port, no restart loop.
        assert [(int(str(w.info["pid"])), w.info["listen"]) for w in pushes] == [(again.push.pid, f"127.0.0.1:{port}")]
    finally:
        await store.close()
    assert not again.push.gone() and not again.pop.gone()
    stop_suite(again.process, signal.SIGTERM, data_dir)
    await all_gone(again.children, "the second run's daemons and redis-server to stop")


# --- tests ---------------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_a_sigkilled_dataq_run_takes_its_daemons_and_redis_server_with_it(
    tmp_path: Path, launched: Launched
) -> None:
    port = free_port()
    config = suite_config(tmp_path, port)
    data_dir = tmp_path / "data"
    first = await serving(launched, launched.dataq_run(config), data_dir)
    await feed(port, FED, start=0)
    store = QueueStore.from_url(first.url, "transfer")
    try:
        await summary_when(store, FED)
    finally:
        await store.close()

    children = the_children_at_the_end(launched, first)
    # No chance to stop anything itself: only the kernel's parent-death signal can reach the children now.
    first.process.kill()
    assert await exited(first.process) == -signal.SIGKILL
    await all_gone(children, "the children of the SIGKILLed dataq run to stop")
    assert find_running(data_dir) is None
    # Each daemon stopped as on a hang-up: gracefully, however often the dying runner's threads signalled it.
    for component in ("push", "pop"):
        events = [json.loads(line) for line in (tmp_path / "log" / f"{component}.log").read_text().splitlines()]
        assert any(e["event"].startswith("hang-up") and e.get("signal") == "SIGUSR2" for e in events), component
        assert not any(e["event"] == "second signal: exiting at once" for e in events), component

    await a_new_run_starts_cleanly(launched, config, port, data_dir, first, done_at_least=FED)


@pytest.mark.timeout(120)
async def test_a_second_stop_signal_kills_the_daemons_and_stops_redis_server_before_dataq_run_exits(
    tmp_path: Path, launched: Launched
) -> None:
    port = free_port()
    held = tmp_path / "held"
    held.mkdir()
    (held / HOLD_FILE).touch()
    config = suite_config(tmp_path, port)
    text = config.read_text()
    changes = {'actions = ["echo"]': f'actions = ["{HELD}"]', "grace_period = 2.0": f"grace_period = {LONG_GRACE}"}
    for old, new in changes.items():
        assert old in text, f"suite_config no longer writes {old!r}; this test must be told how to change it"
        text = text.replace(old, new)
    config.write_text(f'{text}[queues.transfer."{HELD}"]\ndir = "{held}"\n')
    data_dir = tmp_path / "data"
    first = await serving(launched, launched.dataq_run(config), data_dir)
    await feed(port, 3, start=0)

    async def pop_busy() -> bool:
        return any(name.startswith("started-") for name in os.listdir(held))

    await eventually(pop_busy, timeout=START_TIMEOUT, what="the pop daemon to run a held record")

    children = the_children_at_the_end(launched, first)
    # As `timeout` or a terminal may deliver them: one to the process group, then one to the runner itself.
    os.kill(first.process.pid, signal.SIGTERM)
    os.kill(first.process.pid, signal.SIGINT)
    assert await exited(first.process) == FORCED_EXIT_STATUS, launched.stderr_of(first.process)
    # No waiting here: the forced exit stops redis-server (and reaps it) before the runner is gone. Had the runner
    # left it to the parent-death signal, the server would only now be stopping.
    assert first.redis.gone(), "redis-server outlived the forced exit of dataq run"
    assert find_running(data_dir) is None
    # The pop daemon holds records and has a grace period longer than this wait: asked to stop (SIGTERM, from the
    # runner or from the parent-death signal) it would wait out its grace period, or take its own forced exit (130)
    # when a second SIGTERM comes. Only the runner's SIGKILL ends it in time, and then either the runner reaped it
    # before exiting (its status is not ours to collect) or this test adopted it and sees the SIGKILL.
    await all_gone(children, "the daemons of the forcibly stopped dataq run to be killed")
    assert exit_status(first.pop) in (None, -signal.SIGKILL)

    # The held records go back to the queue (their worker is dead) and must be done by the next run.
    (held / HOLD_FILE).unlink()
    await a_new_run_starts_cleanly(launched, config, port, data_dir, first, done_at_least=3)
