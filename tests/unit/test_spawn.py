"""Running a program to its end through posix_spawn: its output, its status, its session killed when the caller
gives up, on asyncio's loop and on uvloop (the daemons')."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from dataq.runtime.spawn import Finished, run_to_end
from tests.conftest import skip_on_other_os

pytestmark = skip_on_other_os("needs Linux's pidfd_open")

GONE_TIMEOUT = 10.0
LOOPS = ("asyncio", "uvloop")
T = TypeVar("T")


def on(loop: str, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(main()) if loop == "asyncio" else uvloop.run(main())


async def cancelled_once_written(script: str, written: Path, after: float = 0.0) -> None:
    """Run ``sh -c script`` and cancel the caller ``after`` seconds once the script has written a line to
    ``written``; the cancellation must come out."""
    started = asyncio.create_task(run_to_end(["sh", "-c", script]))
    while not written.exists() or not written.read_text().endswith("\n"):
        await asyncio.sleep(0.01)
    await asyncio.sleep(after)
    started.cancel()
    with pytest.raises(asyncio.CancelledError):
        await started


def gone(pid: int) -> bool:
    """Exited and reaped (a zombie still has its /proc entry)."""
    return not Path(f"/proc/{pid}").exists()


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GONE_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_program_gives_its_status_and_all_its_output_however_long(loop: str) -> None:
    script = ("import sys; sys.stdout.write('o' * 1_000_000); sys.stderr.write('e' * 200_000); "
              "sys.stdout.flush(); sys.exit(3)")
    finished = on(loop, lambda: run_to_end([sys.executable, "-c", script]))
    assert finished == Finished(3, b"o" * 1_000_000, b"e" * 200_000), "more than a pipe holds, no deadlock"


@pytest.mark.parametrize("loop", LOOPS)
def test_a_program_killed_by_a_signal_ends_with_its_number_negated_and_reads_nothing_from_stdin(loop: str) -> None:
    assert on(loop, lambda: run_to_end(["cat"])) == Finished(0, b"", b""), "stdin is /dev/null: cat ends at once"
    assert on(loop, lambda: run_to_end(["sh", "-c", "kill -9 $$"])).returncode == -9


@pytest.mark.parametrize("loop", LOOPS)
def test_output_left_open_by_a_helper_is_waited_for(loop: str) -> None:
    # As communicate() does: rsync's helpers may write after the program itself has ended.
    finished = on(loop, lambda: run_to_end(["sh", "-c", "(sleep 0.2; echo late) & echo early"]))
    assert finished == Finished(0, b"early\nlate\n", b"")


async def test_a_program_that_is_not_there_cannot_be_started() -> None:
    with pytest.raises(FileNotFoundError):
        await run_to_end(["dataq-no-such-program"])


@pytest.mark.parametrize("loop", LOOPS)
def test_a_cancelled_caller_kills_the_program_and_its_helpers_and_reaps_it(loop: str, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    on(loop, lambda: cancelled_once_written(f"sleep 600 & echo $$ $! > {pids}; wait", pids))
    shell, helper = (int(pid) for pid in pids.read_text().split())
    assert gone(shell), "killed and reaped before the cancellation came out"
    wait_for(lambda: gone(helper) or _zombie_of_another(helper), "the helper to be killed with its session")


def _zombie_of_another(pid: int) -> bool:
    """The helper, killed, may wait for its new parent (init) to reap it."""
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def descriptors_after_a_first_loop(loop: str = "uvloop") -> set[str]:
    """The descriptors open once a first event loop has run: libuv opens a pipe for the whole process with its
    first loop (the lock of its signal handling) and keeps it, so the first run, whichever test it is in this
    worker, must not count as a leak."""
    on(loop, lambda: run_to_end(["true"]))
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("loop", LOOPS)
def test_no_descriptor_is_left_open(loop: str) -> None:
    before = descriptors_after_a_first_loop(loop)
    for _ in range(20):
        on(loop, lambda: run_to_end(["true"]))
    assert set(os.listdir("/proc/self/fd")) <= before


@pytest.mark.parametrize("loop", LOOPS)
def test_cancelling_kills_helpers_that_outlive_the_program_holding_its_output(loop: str, tmp_path: Path) -> None:
    helper_pid = tmp_path / "helper"
    # Cancelled once the shell has exited, while its helper still holds stdout and stderr.
    on(loop, lambda: cancelled_once_written(f"sleep 600 & echo $! > {helper_pid}", helper_pid, after=0.1))
    helper = int(helper_pid.read_text())
    wait_for(lambda: gone(helper) or _zombie_of_another(helper), "the helper to be killed")


def test_a_child_that_cannot_be_watched_is_killed_and_reaped_not_left_running(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    def refused(pid: int) -> int:
        while not pid_file.exists() or not pid_file.read_text().endswith("\n"):
            time.sleep(0.01)
        raise OSError(24, "Too many open files")

    before = descriptors_after_a_first_loop()
    monkeypatch.setattr(os, "pidfd_open", refused)
    with pytest.raises(OSError, match="Too many open files"):
        uvloop.run(run_to_end(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 600"]))
    monkeypatch.undo()
    wait_for(lambda: gone(int(pid_file.read_text())), "the unwatched child to be killed and reaped")
    assert set(os.listdir("/proc/self/fd")) <= before


def test_the_child_gets_the_signals_python_ignores_back_at_their_defaults() -> None:
    # rsync and ssh must die of SIGPIPE and SIGXFSZ as any program would, as subprocess sees to.
    status = uvloop.run(run_to_end(["grep", "^SigIgn:", "/proc/self/status"])).stdout.decode()
    ignored = int(status.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1)) and not ignored & (1 << (signal.SIGXFSZ - 1)), status
