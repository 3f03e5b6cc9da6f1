"""Child processes that never outlive their parent: Linux's parent-death signal (``PR_SET_PDEATHSIG``).

``dataq run`` starts the embedded redis-server and the daemons as children. Killed with SIGKILL, it has no
chance to stop them, and they would run on: the next ``dataq run`` would find the data directory locked and the
push port taken. A child started with :func:`die_with_parent` gets a signal from the kernel the moment its
parent dies: one that makes it stop gracefully (SIGTERM for redis-server, SIGHUP for a dataq daemon).
Hand-written rather than a library (python-prctl needs libcap headers to build): it is one ``prctl`` call
through ctypes.

The kernel's "parent" is the *thread* that started the child: start such children from the main thread (the
event loop's), never from a worker thread that may end first. When that thread dies, the child passes to another
thread of the process, and may get the signal again when that one dies too: a child must take repeats calmly.
"""

from __future__ import annotations

import ctypes
import os
import signal
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
