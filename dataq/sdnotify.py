"""The systemd notification protocol (``sd_notify``), spoken directly over ``$NOTIFY_SOCKET``.

A ``Type=notify`` unit tells systemd it is serving with ``READY=1``, proves its main loop still turns with
``WATCHDOG=1`` (``WatchdogSec=``), and says it is shutting down with ``STOPPING=1``. The protocol is one
datagram of ``KEY=value`` lines to the unix socket named by ``$NOTIFY_SOCKET`` (a leading ``@`` names an
abstract socket), so no C library is needed. Outside systemd the variable is unset and every call is a no-op
that returns False; a failed send is logged, never raised: a daemon must not die because its supervisor's
socket hiccuped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Mapping

from dataq.logs import get_logger

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"
WATCHDOG_USEC_ENV = "WATCHDOG_USEC"
WATCHDOG_PID_ENV = "WATCHDOG_PID"
WATCHDOG_FRACTION = 0.5
"""Ping at this fraction of ``WatchdogSec=``, as sd_watchdog_enabled(3) recommends: one late ping is no restart."""
SEND_TIMEOUT = 2.0
"""Seconds a notification may wait for room in systemd's socket queue before it is given up (and logged)."""
ABSTRACT_PREFIX = "@"
MICROSECONDS = 1_000_000

log = get_logger()


def notify(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` (``KEY=value`` lines) to systemd; True if it was sent, False outside systemd or on error.

    A full socket queue (systemd busy, e.g. at boot) is waited out for up to :data:`SEND_TIMEOUT`, as libsystemd
    waits: a lost ``READY=1`` would have systemd kill the daemon at the end of its start timeout. Only a stalled
    systemd makes the caller wait at all.
    """
    address = _socket_address((os.environ if environ is None else environ).get(NOTIFY_SOCKET_ENV, ""))
    if address is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(SEND_TIMEOUT)
            sock.connect(address)
            sock.send(message.encode())
    except OSError as exc:
        log.warning("cannot notify systemd", message=message.split("\n", 1)[0], error=str(exc))
        return False
    return True


def ready(status_text: str | None = None) -> bool:
    """``READY=1``: start-up is over and the daemon serves (systemd now starts the units ordered after it)."""
    return notify("READY=1" + (f"\nSTATUS={_one_line(status_text)}" if status_text else ""))


def watchdog() -> bool:
    """``WATCHDOG=1``: the main loop is alive; without one per ``WatchdogSec=``, systemd restarts the unit."""
    return notify("WATCHDOG=1")


def stopping(status_text: str | None = None) -> bool:
    """``STOPPING=1``: the daemon is shutting down (systemd stops expecting watchdog pings)."""
    return notify("STOPPING=1" + (f"\nSTATUS={_one_line(status_text)}" if status_text else ""))


def status(text: str) -> bool:
    """``STATUS=text``: one line that ``systemctl status`` shows."""
    return notify(f"STATUS={_one_line(text)}")


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between two watchdog pings (half of ``$WATCHDOG_USEC``), or None when no watchdog is set.

    None too when ``$WATCHDOG_PID`` names another process: the variables were inherited, not meant for us.
    """
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get(WATCHDOG_USEC_ENV, ""))
    except ValueError:
        return None
    pid = env.get(WATCHDOG_PID_ENV)
    if usec <= 0 or (pid is not None and pid != str(os.getpid())):
        return None
    return usec * WATCHDOG_FRACTION / MICROSECONDS


async def run_watchdog(stop: asyncio.Event, alive: Callable[[], bool] | None = None) -> None:
    """Ping the watchdog every :func:`watchdog_interval` until ``stop``; return at once if there is none.

    Run as a task on the daemon's event loop, so a blocked loop stops the pings and systemd restarts the
    daemon. ``alive`` lets the daemon veto a ping when its own main loop has stalled while the event loop has
    not (e.g. a worker stuck past every timeout); it must be cheap and must not return False merely because
    Redis is down, which the daemon survives by reconnecting.
    """
    interval = watchdog_interval()
    if interval is None:
        return
    while not stop.is_set():
        if alive is None or alive():
            watchdog()
        else:
            log.warning("main loop stalled; withholding the watchdog ping so that systemd restarts the daemon")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


def _socket_address(value: str) -> str | None:
    if value.startswith(ABSTRACT_PREFIX):
        return "\0" + value[len(ABSTRACT_PREFIX):]
    if value.startswith("/"):
        return value
    # Unset, or a transport we do not speak (systemd 253+ also allows vsock: for VMs); nothing to notify.
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())
