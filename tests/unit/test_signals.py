"""Stop signals, sent to a real process: a first stop signal stops it gracefully, a second one forces the exit,
parent deaths and hang-ups, however many, only ever stop it gracefully, and a daemon that reloads its settings
takes a hang-up as the request to."""

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
    stop, reload = asyncio.Event(), asyncio.Event()
    reloads = sys.argv[1] == "reloads"
    install_stop_signals(stop, on_force=lambda: print("forced", flush=True), reload=reload if reloads else None)
    for name in sys.argv[2:]:
        os.kill(os.getpid(), getattr(signal, name))
        await asyncio.sleep(0.05)  # the handler runs on the loop: let it
        if reload.is_set():
            print("reload", flush=True)
            reload.clear()
    await asyncio.wait_for(stop.wait(), 10)
    print("stopped gracefully", flush=True)

asyncio.run(main())
"""


def daemon(*signals: str, reloads: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", DAEMON, "reloads" if reloads else "stops", *signals],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("first", ["SIGTERM", "SIGINT", "SIGUSR2", "SIGHUP"])
def test_one_stop_signal_stops_the_daemon_gracefully(first: str) -> None:
    result = daemon(first)
    assert (result.returncode, result.stdout) == (0, "stopped gracefully\n"), result.stderr


def test_a_second_stop_signal_forces_the_exit_after_taking_the_children_along() -> None:
    result = daemon("SIGTERM", "SIGINT")
    assert (result.returncode, result.stdout) == (FORCED_EXIT_STATUS, "forced\n"), result.stderr


@pytest.mark.parametrize("repeated", ["SIGUSR2", "SIGHUP"])
def test_repeated_parent_deaths_and_hang_ups_never_force_the_exit(repeated: str) -> None:
    # The parent-death signal may come once per thread of a dying parent (dataq run).
    result = daemon(repeated, repeated, repeated)
    assert (result.returncode, result.stdout) == (0, "stopped gracefully\n"), result.stderr


def test_a_daemon_that_reloads_takes_each_hang_up_as_a_reload_and_stops_on_a_stop_signal() -> None:
    result = daemon("SIGHUP", "SIGHUP", "SIGTERM", reloads=True)
    assert (result.returncode, result.stdout) == (0, "reload\nreload\nstopped gracefully\n"), result.stderr
