"""Child processes die with their parent: what ``dataq run`` and ``network_move`` start never outlives them, even
when they are killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataq.runtime import children
from tests.conftest import skip_on_other_os

GONE_TIMEOUT = 30.0

PARENT = """
import asyncio, sys
from dataq.actions.rsync import run_command

async def main():
    asyncio.create_task(run_command(["sleep", "600"]))
    await asyncio.Event().wait()

asyncio.run(main())
"""


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return ""


def gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status  # exited; its new parent has not reaped it yet


def wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + GONE_TIMEOUT
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@skip_on_other_os("needs Linux's PR_SET_PDEATHSIG and /proc")
def test_a_transfer_dies_with_the_pop_daemon_that_started_it_even_by_sigkill() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT])
    try:
        # The transfer is the child running sleep: not dataq's probe of setpriv (which runs true first), nor
        # setpriv itself before it exec'd the program. It arms the signal, then execs: a kill before that is the
        # documented window in which a child may outlive its parent, so the kill waits until the program runs.
        def transfers() -> list[int]:
            return [child for child in children_of(parent.pid) if command_of(child) == "sleep"]

        wait_for(transfers, "the transfer's program to run")
        (transfer,) = transfers()
        parent.kill()
        parent.wait()
        wait_for(lambda: gone(transfer), "the transfer to end with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for child in children_of(parent.pid) if parent.poll() is None else []:
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR2])
@skip_on_other_os("needs Linux's PR_SET_PDEATHSIG and /proc")
def test_a_child_started_to_die_with_its_parent_gets_the_signal_asked_for(signum: int, tmp_path: Path) -> None:
    script = f"""
import signal, subprocess, sys, time
from dataq.runtime.children import die_with_parent
child = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
signal.signal({int(signum)}, lambda *_: (open(sys.argv[1], "w").write("got it"), sys.exit(0)))
print("ready", flush=True)
time.sleep(600)
''', "{tmp_path / 'got'}"], preexec_fn=die_with_parent({int(signum)}), stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(600)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        wait_for(lambda: gone(child), "the child to end with its parent")
        assert (tmp_path / "got").read_text() == "got it"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()


def test_a_child_is_armed_by_setpriv_when_it_knows_pdeathsig_else_by_a_preexec_function(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # setpriv lets Python start the child with vfork: a preexec function forces a fork of the whole daemon.
    monkeypatch.setattr(children, "setpriv_with_pdeathsig", lambda: "/usr/bin/setpriv")
    assert children.dying_with_parent(["rsync", "-a"]) == (
        ["/usr/bin/setpriv", "--pdeathsig=TERM", "--", "rsync", "-a"], None)
    monkeypatch.setattr(children, "setpriv_with_pdeathsig", lambda: None)
    argv, preexec = children.dying_with_parent(["rsync", "-a"], signal.SIGHUP)
    assert argv == ["rsync", "-a"] and callable(preexec)


def test_a_setpriv_older_than_pdeathsig_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    older = tmp_path / "setpriv"  # util-linux 2.32 (RHEL 8): "unrecognized option '--pdeathsig=TERM'", status 1
    older.write_text("#!/bin/sh\necho \"setpriv: unrecognized option '$1'\" >&2\nexit 1\n")
    older.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    children.setpriv_with_pdeathsig.cache_clear()
    try:
        assert children.setpriv_with_pdeathsig() is None
    finally:
        children.setpriv_with_pdeathsig.cache_clear()
