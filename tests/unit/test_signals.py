"""Stop signals, sent to a real process: a first stop signal stops it gracefully, a second one forces the exit, and
hang-ups, however many, only ever stop it gracefully."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dataq.runtime.signals import FORCED_EXIT_STATUS

DAEMON = """
import asyncio, os, signal, sys
from dataq.logs import configure_logging
from dataq.runtime.signals import install_stop_signals

async def main():
    configure_logging(component="signals")  # to stderr: stdout says how it ended
    stop = asyncio.Event()
    install_stop_signals(stop, on_force=lambda: print("forced", flush=True))
    for name in sys.argv[1:]:
        os.kill(os.getpid(), getattr(signal, name))
        await asyncio.sleep(0.05)  # the handler runs on the loop: let it
    await asyncio.wait_for(stop.wait(), 10)
    print("stopped gracefully", flush=True)

asyncio.run(main())
"""


def daemon(*signals: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", DAEMON, *signals], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("first", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_one_stop_signal_stops_the_daemon_gracefully(first: str) -> None:
    result = daemon(first)
    assert (result.returncode, result.stdout) == (0, "stopped gracefully\n"), result.stderr


def test_a_second_stop_signal_forces_the_exit_after_taking_the_children_along() -> None:
    result = daemon("SIGTERM", "SIGINT")
    assert (result.returncode, result.stdout) == (FORCED_EXIT_STATUS, "forced\n"), result.stderr


def test_repeated_hang_ups_never_force_the_exit() -> None:
    # The parent-death signal may come once per thread of a dying parent (dataq run).
    result = daemon("SIGHUP", "SIGHUP", "SIGHUP")
    assert (result.returncode, result.stdout) == (0, "stopped gracefully\n"), result.stderr
