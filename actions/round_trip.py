"""How far away an rsync daemon is, learnt before the first batch is cut: the time its greeting takes.

Every rsync call pays about seven round trips besides its data (:mod:`.transfer_tuner`). Learnt from the calls
alone, a long link costs its first round of calls: they are cut at ``batch_size`` before anything is known, and
over a 75 ms link each of them took 1.2 s for a few hundredths of data (the cascade benchmark's first 500 records
took 2.6 s of its 11). So ``network_move`` times one connection to its daemon as it starts: the daemon greets
every connection at once (``@RSYNCD: <protocol>``), and the greeting reaches the client two round trips after it
began to connect (the TCP handshake's, then the greeting's), whatever the link's bandwidth. The connection is
closed once greeted, as a health check's is (the daemon logs ``connect from``, nothing else).

A destination that cannot be reached, does not greet within :data:`PROBE_TIMEOUT` or greets as no rsync daemon
does tells nothing: the batches then start at ``batch_size``, as they always did, and the calls teach the tuner.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from dataq.logs import get_logger

from .rsync import daemon_address

GREETING = b"@RSYNCD: "
"""How an rsync daemon's greeting starts (its protocol version and, since 3.2, its digests follow)."""
GREETING_ROUND_TRIPS = 2
"""Round trips from the start of a connect to the greeting's arrival: the handshake's, then the greeting's."""
PROBE_TIMEOUT = 2.0
"""Seconds the probe waits for a greeting: a link slower than that is learnt from the calls."""

log = get_logger()


async def greeting_seconds(destination: str, within: float = PROBE_TIMEOUT) -> float | None:
    """Seconds from the start of a connect to the greeting of the rsync daemon of ``destination`` (None: not a
    daemon's destination, not reached, no greeting within ``within`` seconds, or not an rsync daemon's greeting)."""
    address = daemon_address(destination)
    if address is None:
        return None
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(within):
            # The name is looked up first, untimed: a slow lookup on a LAN would pass for a far link.
            family, _, protocol, _, where = (await loop.getaddrinfo(address.host, address.port,
                                                                       type=socket.SOCK_STREAM))[0]
            started = loop.time()
            reader, writer = await asyncio.open_connection(str(where[0]), int(where[1]), family=family,
                                                           proto=protocol)
            try:
                line = await reader.readline()
                greeted = loop.time()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except Exception as exc:  # the probe only advises: whatever goes wrong, the calls will teach the tuner
        log.debug("no greeting from the destination's daemon", destination=destination, error=repr(exc))
        return None
    return greeted - started if line.startswith(GREETING) else None


def round_trip(greeting: float) -> float:
    """The round trip a greeting of ``greeting`` seconds says the link has."""
    return greeting / GREETING_ROUND_TRIPS
