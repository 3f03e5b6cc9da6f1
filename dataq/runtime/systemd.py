"""The systemd notification protocol (``sd_notify``), spoken directly over ``$NOTIFY_SOCKET``, without blocking.

A ``Type=notify`` unit tells systemd it is serving with ``READY=1``, proves its main loops still turn with
``WATCHDOG=1`` (``WatchdogSec=``), and says it is shutting down with ``STOPPING=1``. The protocol is one
datagram of ``KEY=value`` lines to the unix socket named by ``$NOTIFY_SOCKET`` (a leading ``@`` names an
abstract socket). Hand-written rather than a library: it is one datagram, and the packages that send it
(sdnotify, systemd-python) block the caller while systemd's queue is full, which here would stall the event
loop. Outside systemd the variable is unset and every call is a no-op that returns False; a failed send is
logged, never raised: a daemon must not die because its supervisor's socket hiccuped.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Mapping, Sequence

from dataq.logs import get_logger
from dataq.runtime.supervise import every

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"
WATCHDOG_USEC_ENV = "WATCHDOG_USEC"
WATCHDOG_PID_ENV = "WATCHDOG_PID"
WATCHDOG_FRACTION = 0.5
"""Ping at this fraction of ``WatchdogSec=``, as sd_watchdog_enabled(3) recommends: one late ping is no restart."""
ONESHOT_SEND_TIMEOUT = 60.0
"""Seconds a oneshot unit's process (``dataq notify-crash``) may spend delivering, within the 90 s systemd gives
such a unit by default."""
SEND_TIMEOUT = 2.0
"""Seconds a notification may wait for room in systemd's socket queue before it is given up (and logged)."""
STALL_AFTER = 60.0
"""Seconds a main loop may go without turning, while it is not resting by choice, before the watchdog counts it
as stalled: longer than a Redis call may take (``socket_timeout``) plus the longest backoff between two."""
ABSTRACT_PREFIX = "@"
MICROSECONDS = 1_000_000

log = get_logger()

Liveness = Callable[[], bool]
"""Asked before each watchdog ping: False when a main loop has stalled (the ping is then withheld)."""


async def notify(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` (``KEY=value`` lines) to systemd; True if it was sent, False outside systemd or on error.

    A full socket queue (systemd busy, e.g. at boot) is waited out for up to :data:`SEND_TIMEOUT` without blocking
    the event loop, as libsystemd waits: a lost ``READY=1`` would have systemd kill the daemon at the end of its
    start timeout.
    """
    address = _socket_address((os.environ if environ is None else environ).get(NOTIFY_SOCKET_ENV, ""))
    if address is None:
        return False
    loop = asyncio.get_running_loop()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK) as sock:
            # Connected, the socket is writable exactly when systemd's queue has room (an unconnected one always is).
            sock.connect(address)
            async with asyncio.timeout(SEND_TIMEOUT):
                await loop.sock_sendall(sock, message.encode())
    except (OSError, TimeoutError) as exc:
        log.warning("cannot notify systemd", message=message.split("\n", 1)[0], error=str(exc) or "timed out")
        return False
    return True


async def ready(status_text: str | None = None) -> bool:
    """``READY=1``: start-up is over and the daemon serves (systemd now starts the units ordered after it)."""
    return await notify("READY=1" + (f"\nSTATUS={_one_line(status_text)}" if status_text else ""))


async def watchdog() -> bool:
    """``WATCHDOG=1``: the main loops are alive; without one per ``WatchdogSec=``, systemd restarts the unit."""
    return await notify("WATCHDOG=1")


async def stopping(status_text: str | None = None) -> bool:
    """``STOPPING=1``: the daemon is shutting down (systemd stops expecting watchdog pings)."""
    return await notify("STOPPING=1" + (f"\nSTATUS={_one_line(status_text)}" if status_text else ""))


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


async def run_watchdog(interval: float, stop: asyncio.Event, checks: Sequence[Liveness] = ()) -> None:
    """Ping the watchdog every ``interval`` seconds until ``stop``, while every check says its loop is alive.

    Run as a task on the daemon's event loop, so a blocked event loop stops the pings; ``checks`` stop them when
    a main loop has stalled while the event loop has not (the push committer stuck in one call, an action
    running past every timeout). A check must not fail merely because Redis is down: the daemon survives that by
    reconnecting, and a restart would not bring Redis back.
    """
    stalled = False
    async for _ in every(interval, stop):
        if all(check() for check in checks):
            if stalled:
                log.info("main loops turn again; pinging the watchdog")
            stalled = False
            await watchdog()
        elif not stalled:
            stalled = True
            log.error("a main loop stalled; withholding the watchdog ping so that systemd restarts the daemon")


def _socket_address(value: str) -> str | None:
    if value.startswith(ABSTRACT_PREFIX):
        return "\0" + value[len(ABSTRACT_PREFIX):]
    if value.startswith("/"):
        return value
    # Unset, or a transport we do not speak (systemd 253+ also allows vsock: for VMs); nothing to notify.
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def escape_instance(name: str) -> str:
    """``name`` as a unit's instance name, escaped as ``systemd-escape`` does, so that ``%I`` gives it back: a
    queue named ``raw-data`` is ``dataq-push@raw\\x2ddata.service`` (an unescaped ``-`` in an instance means ``/``)."""
    escaped = []
    for position, char in enumerate(name):
        if char.isascii() and (char.isalnum() or char in "_:" or (char == "." and position > 0)):
            escaped.append(char)
        elif char == "/":
            escaped.append("-")
        else:
            escaped.append("".join(f"\\x{byte:02x}" for byte in char.encode()))
    return "".join(escaped)


def path_instance(directory: str) -> str:
    """``directory`` as ``systemd-escape --path`` writes it (``/data/incoming`` -> ``data-incoming``): the instance
    of a unit about a path, which ``%f`` gives back."""
    stripped = os.path.normpath(os.path.abspath(directory)).strip("/")
    return escape_instance(stripped) if stripped else "-"  # the root directory, as systemd-escape has it


def unescape_instance(instance: str) -> str:
    """What ``%I`` makes of an instance name (``systemd-escape --unescape``): the inverse of :func:`escape_instance`."""
    unescaped = bytearray()
    position = 0
    while position < len(instance):
        code = instance[position + 2:position + 4]
        if instance.startswith("\\x", position) and len(code) == 2 and all(c in "0123456789abcdefABCDEF" for c in code):
            unescaped.append(int(code, 16))
            position += 4
            continue
        unescaped += b"/" if instance[position] == "-" else instance[position].encode()
        position += 1
    return unescaped.decode(errors="replace")

