"""Stop signals: SIGTERM and SIGINT only set the daemon's stop event; a second one while stopping forces the exit.

A handler does nothing else, so the daemon's own shutdown (stop intake, drain, cancel) runs in its main loop.
Forcing is safe because every state a daemon leaves behind is crash-safe; a process with children says how to
take them along (``on_force``), so none is left running without its parent.

SIGUSR2, the parent-death signal ``dataq run`` gives its daemons (:mod:`dataq.runtime.children`), stops the
daemon gracefully too, but never forces: the kernel may send it once per thread of the dying parent, and those
repeats must not cut a drain short.

SIGHUP asks a daemon that can take its settings again to do so (it sets the ``reload`` event: ``systemctl reload``
sends it); a process that cannot (no ``reload`` event: a feeder, the web console, ``dataq run`` itself) takes it as
the terminal closing, and stops gracefully as for SIGUSR2.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

from dataq.logs import get_logger

FORCED_EXIT_STATUS = 130
"""Exit status of a forced exit: what a shell reports for a process ended by SIGINT."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
HANG_UP = signal.SIGHUP
PARENT_DIED = signal.SIGUSR2
"""The signal ``dataq run`` arms its daemons with, for the kernel to send when it dies."""

log = get_logger()


def install_stop_signals(stop: asyncio.Event, *, on_force: Callable[[], None] | None = None,
                         reload: asyncio.Event | None = None) -> None:
    """SIGTERM/SIGINT set ``stop``; another one once ``stop`` is set runs ``on_force`` and exits at once. SIGUSR2
    sets ``stop`` (never forcing); SIGHUP sets ``reload`` if given, else ``stop`` (never forcing)."""
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if not stop.is_set():
            log.info("stopping", signal=name)
            stop.set()
            return
        log.warning("second signal: exiting at once", signal=name)
        if on_force is not None:
            try:
                on_force()
            except Exception:  # the exit must happen whatever went wrong on the way
                log.exception("forced exit: taking the children along failed")
        os._exit(FORCED_EXIT_STATUS)

    def on_calm_stop(signum: int) -> None:
        if not stop.is_set():
            # Unusual enough to say louder than a SIGTERM: the terminal closed, or dataq run died.
            log.warning("hang-up: stopping", signal=signal.Signals(signum).name,
                        why="the parent died" if signum == PARENT_DIED else "the terminal closed")
            stop.set()

    def on_hang_up() -> None:
        if reload is None:
            on_calm_stop(HANG_UP)
        elif not stop.is_set():
            log.info("reloading the settings", signal=HANG_UP.name)
            reload.set()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    loop.add_signal_handler(PARENT_DIED, on_calm_stop, PARENT_DIED)
    loop.add_signal_handler(HANG_UP, on_hang_up)
