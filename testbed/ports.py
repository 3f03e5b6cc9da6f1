"""Ports for daemons a test starts on a port it must know before they start (a cascade's next site).

``free_port`` asks the kernel for an ephemeral port and lets it go: until the daemon binds it, any process may be
given the same port by the kernel, and under a loaded parallel suite another test's redis-server or rsync daemon
sometimes was (a cascade's feeder then talked to it). Ports below the ephemeral range are never handed out that
way: :func:`unclaimed_port` picks one of those at random, free when asked.

Free when asked is not enough between two pickers: two tests that each pick a port before binding it could pick
the same one (a CI run had two cascades' mountains on one port, each feeder talking to the other's daemon). So each
pytest-xdist worker picks from a slice of the range of its own, and a process does not hand out a port again while
it is among the last it handed out.
"""

from __future__ import annotations

import os
import random
import socket
from collections import deque

from dataq.embedded.redis_server import LOOPBACK

LOWEST = 20_000
"""The lowest port picked (below it lie the well-known and registered ports services are configured on)."""
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_HANDED_OUT: deque[int] = deque(maxlen=256)
"""The ports this process handed out last (a test may hold a few hundred before binding them)."""


def ephemeral_low() -> int:
    """The lowest port the kernel hands out to sockets bound to port 0 and to outgoing connections."""
    try:
        with open(EPHEMERAL_RANGE) as source:
            return int(source.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def unclaimed_port() -> int:
    """A loopback TCP port below the ephemeral range, in this process's share of it (:func:`share`), that nothing
    is bound to right now and that this process did not hand out lately."""
    low, high = share()
    for _ in range(200):
        port = random.randint(low, high)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                continue
        _HANDED_OUT.append(port)
        return port
    raise RuntimeError(f"no free loopback port between {low} and {high}")


def share() -> tuple[int, int]:
    """The lowest and highest port this process picks from: under pytest-xdist, its worker's slice of the ports
    between :data:`LOWEST` and the ephemeral range; otherwise all of them."""
    high = ephemeral_low() - 1
    if high <= LOWEST:
        raise RuntimeError(f"the ephemeral port range starts at {high + 1}: no room below it for test daemons")
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and workers.isdigit() and int(workers) > 0):
        return LOWEST, high
    width = (high - LOWEST + 1) // int(workers)
    low = LOWEST + int(worker[2:]) % int(workers) * width
    return low, low + width - 1
