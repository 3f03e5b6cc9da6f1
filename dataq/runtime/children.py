"""Child processes that never outlive their parent: Linux's parent-death signal (``PR_SET_PDEATHSIG``).

``dataq run`` starts the embedded redis-server and the daemons as children. Killed with SIGKILL, it has no
chance to stop them, and they would run on: the next ``dataq run`` would find the data directory locked and the
push port taken. A child started with :func:`die_with_parent` gets a signal from the kernel the moment its
parent dies: one that makes it stop gracefully (SIGTERM for redis-server, SIGUSR2 for a dataq daemon: SIGHUP
reloads its settings).
Hand-written rather than a library (python-prctl needs libcap headers to build): it is one ``prctl`` call
through ctypes.

A ``preexec_fn`` makes Python fork the whole daemon and run Python in the child (5.6 ms of CPU per start from a
pop daemon, measured), where a plain start uses ``vfork`` (0.8 ms) on asyncio's loop. Children started often
(``network_move``'s rsync, one per batch) are therefore armed by util-linux's ``setpriv --pdeathsig`` exec'ing the
program instead (:func:`dying_with_parent`), when it is installed, and started by :mod:`dataq.runtime.spawn`
(``posix_spawn``: uvloop, the daemons' loop, would fork the daemon even for a plain start).

The kernel's "parent" is the *thread* that started the child: start such children from the main thread (the
event loop's), never from a worker thread that may end first. When that thread dies, the child passes to another
thread of the process, and may get the signal again when that one dies too: a child must take repeats calmly.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl  # looked up here: the child, between fork and exec, must not load anything


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for subprocess: the child gets ``signum`` when the thread starting it (see above) dies.

    It also covers the parent dying between the fork and the ``prctl``: the child then sends itself the signal.
    """
    parent = os.getpid()

    def arm() -> None:
        if _prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
            os._exit(127)  # refusing to start is better than an orphan nobody will stop
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return arm


SETPRIV_PROBE_TIMEOUT = 5.0


@functools.cache
def setpriv_with_pdeathsig() -> str | None:
    """util-linux's ``setpriv``, if installed and it knows ``--pdeathsig`` (2.33 and later: RHEL 8's 2.32 does
    not, and would fail every start); looked at once per process."""
    program = shutil.which("setpriv")
    if program is None:
        return None
    try:
        probe = subprocess.run([program, "--pdeathsig=TERM", "--", "true"], capture_output=True, check=False,
                               timeout=SETPRIV_PROBE_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    return program if probe.returncode == 0 else None


def dying_with_parent(argv: list[str], signum: int = signal.SIGTERM) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` and the ``preexec_fn`` that start a child which gets ``signum`` when the thread starting it dies:
    through ``setpriv --pdeathsig`` (no ``preexec_fn``: the cheap start) when it can, else with
    :func:`die_with_parent`. (``setpriv`` does not look whether the parent died before it armed the signal:
    in that millisecond a child may outlive its parent, and then ends as it would have anyway.)"""
    setpriv = setpriv_with_pdeathsig()
    if setpriv is None:
        return argv, die_with_parent(signum)
    return [setpriv, f"--pdeathsig={signal.Signals(signum).name.removeprefix('SIG')}", "--", *argv], None
