"""The ceiling of replicated acknowledgements: Redis's own throughput for feeders with a window, each window of
writes acknowledged only once a replica holds it.

Each of ``connections`` connections sends ``window`` SETs (a record's id and line, as ``bench/push.py`` shapes
them) in one write, then, in the ``wait`` set-up, ``WAIT 1 <timeout>``, and sends the next window only once every
reply is in: what a feeder with that window gets when nothing but Redis stands between it and its
acknowledgement. Against a plain server, the master of a replica pair without WAIT, and the same with WAIT, the
ratios show what a replica and its confirmation cost Redis itself on this machine, before dataq does anything.

Hand-written on asyncio streams, because ``redis-benchmark`` cannot send a WAIT after each batch, and a client
library would add its own cost per command to what is measured: here a window is one prepared byte string, and
its replies are only counted.
"""

from __future__ import annotations

import asyncio
import time

from bench.push import lines

CEILING_DATABASE = b"15"
"""The database the SETs go to, away from the queue's keys."""
WAIT_TIMEOUT_MS = 5000


def command(*words: bytes) -> bytes:
    """One command in Redis's wire protocol (RESP)."""
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in words)


def window_of_writes(connection: int, window: int, wait: bool) -> tuple[bytes, int]:
    """The bytes of one window of SETs of ``connection`` (the same keys each time: the data stays small), with a
    WAIT for one replica when ``wait``; and how many replies they get."""
    first = connection * window
    writes = b"".join(command(b"SET", line.split()[1], line) for line in lines(first, window))
    if wait:
        writes += command(b"WAIT", b"1", str(WAIT_TIMEOUT_MS).encode())
    return writes, window + wait


async def replies(reader: asyncio.StreamReader, count: int) -> bytes:
    """Read ``count`` one-line replies (+OK, :n) and return the last; an error reply stops the measurement.
    Replies are counted by their final ``\n`` (a read may end between a reply's ``\r`` and its ``\n``)."""
    seen = 0
    received = bytearray()
    while seen < count:
        chunk = await reader.read(1 << 16)
        if not chunk:
            raise ConnectionError("Redis closed the connection")
        seen += chunk.count(b"\n")
        received += chunk
    lines = bytes(received).split(b"\r\n")[:-1]
    if errors := [line for line in lines if line.startswith(b"-")]:
        raise RuntimeError(f"Redis answered an error: {errors[0][:200]!r}")
    return lines[-1]


async def one_connection(port: int, index: int, window: int, windows: int, wait: bool) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(command(b"SELECT", CEILING_DATABASE))
        await replies(reader, 1)
        writes, count = window_of_writes(index, window, wait)
        for _ in range(windows):
            writer.write(writes)
            last = await replies(reader, count)
            if wait and last == b":0":
                raise RuntimeError("WAIT: no replica confirmed a window of writes; the ceiling would count them")
    finally:
        writer.close()
        await writer.wait_closed()


async def acknowledged_writes(port: int, window: int, connections: int, total: int, wait: bool) -> float:
    """Writes/s of ``connections`` connections with ``window`` writes in flight each, ``total`` writes in all."""
    windows = max(1, total // (window * connections))
    began = time.perf_counter()
    await asyncio.gather(*(one_connection(port, index, window, windows, wait) for index in range(connections)))
    return windows * window * connections / (time.perf_counter() - began)
