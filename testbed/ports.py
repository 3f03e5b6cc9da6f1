"""Ports for daemons a test starts on a port it must know before they start (a cascade's next site).

``free_port`` asks the kernel for an ephemeral port and lets it go: until the daemon binds it, any process may be
given the same port by the kernel, and under a loaded parallel suite another test's redis-server or rsync daemon
sometimes was (a cascade's feeder then talked to it). Ports below the ephemeral range are never handed out that
way: :func:`unclaimed_port` picks one of those at random, free when asked.
"""

from __future__ import annotations

import random
import socket

from dataq.embedded.redis_server import LOOPBACK

LOWEST = 20_000
"""The lowest port picked (below it lie the well-known and registered ports services are configured on)."""
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_low() -> int:
    """The lowest port the kernel hands out to sockets bound to port 0 and to outgoing connections."""
    try:
        with open(EPHEMERAL_RANGE) as source:
            return int(source.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def unclaimed_port() -> int:
    """A loopback TCP port below the ephemeral range that nothing is bound to right now."""
    high = ephemeral_low() - 1
    if high <= LOWEST:
        raise RuntimeError(f"the ephemeral port range starts at {high + 1}: no room below it for test daemons")
    for _ in range(200):
        port = random.randint(LOWEST, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free loopback port between {LOWEST} and {high}")
