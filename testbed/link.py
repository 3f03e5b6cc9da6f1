"""A long link to test on: a userspace TCP relay between two loopback ports, since this machine's kernel has no
``netem``.

A :class:`Link` listens on a loopback port and relays every connection to its target, as a WAN between two sites
would carry it:

* **one-way delay**: every byte reaches the far side ``delay`` seconds after it left (in each direction: a round
  trip costs ``2 × delay``);
* **the handshake's round trip**: a new connection reaches its target only one round trip after it was accepted
  (TCP's SYN, SYN-ACK): the client sees its ``connect`` at once, but its first answer a round trip later than on
  a connection already open, as on a real link;
* **bandwidth**: ``mbit`` megabits per second in each direction, shared by every connection of the link (a token
  bucket per direction: bytes leave in the order they came, each direction's bytes serialised at the rate);
* a buffer of :data:`BUFFER_BYTES` per connection and direction in flight, beyond which the relay stops reading
  (TCP's window: the sender then feels back-pressure).

Half-closes pass through (a peer's end of writing reaches the other side after the delay), so request-reply
protocols that shut down writing (the push daemon's feeders, rsync) work over it.

Run one beside a test or benchmark with :func:`link_process` (a child process, off the caller's event loop and
GIL), or in a loop with :class:`Link`. ``python -m testbed.link --target HOST:PORT --delay 0.075 --mbit 400``
prints ``listening PORT`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from testbed.rsync import LOOPBACK

CHUNK = 64 * 1024
"""Bytes read at once from a side."""
BUFFER_BYTES = 16 * 1024 * 1024
"""Bytes in flight per connection and direction at most: twice what a 150 ms, 400 Mbit/s link holds (7.5 MB),
as a Linux receiver's window grows to."""
START_TIMEOUT = 10.0


class Bucket:
    """One direction's rate, shared by every connection: when each chunk has finished crossing the wire."""

    def __init__(self, bytes_per_second: float | None) -> None:
        self.rate = bytes_per_second
        self._free_at = 0.0

    def sent(self, size: int, now: float) -> float:
        """When a chunk of ``size`` bytes that reached the link at ``now`` has left it."""
        if self.rate is None:
            return now
        start = max(now, self._free_at)
        self._free_at = start + size / self.rate
        return self._free_at


@dataclass
class _Direction:
    """Bytes of one connection in one direction, each with the time it reaches the far side."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    bucket: Bucket
    delay: float
    abort: Callable[[], None]
    """Closes both sides: a side that cannot be written to ends the connection, as a reset would."""

    def __post_init__(self) -> None:
        self.queue: deque[tuple[float, bytes]] = deque()
        self.buffered = 0
        self.ended = False
        self.changed = asyncio.Event()

    async def read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                while self.buffered >= BUFFER_BYTES:
                    self.changed.clear()
                    await self.changed.wait()
                data = await self.reader.read(CHUNK)
                if not data:
                    break
                now = loop.time()
                self.queue.append((self.bucket.sent(len(data), now) + self.delay, data))
                self.buffered += len(data)
                self.changed.set()
        except (ConnectionError, OSError):
            pass
        finally:
            self.ended = True
            self.changed.set()

    async def write(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self.queue:
                    if self.ended:
                        if self.writer.can_write_eof():
                            self.writer.write_eof()
                        return
                    self.changed.clear()
                    await self.changed.wait()
                    continue
                due, data = self.queue[0]
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                self.queue.popleft()
                self.buffered -= len(data)
                self.changed.set()
                self.writer.write(data)
                await self.writer.drain()
        except (ConnectionError, OSError):
            self.abort()


class Link:
    """The relay (see the module's docstring): ``await start()``, then connect to :attr:`port`."""

    def __init__(self, target: tuple[str, int], *, delay: float = 0.0, mbit: float | None = None) -> None:
        self.target, self.delay = target, delay
        rate = None if mbit is None else mbit * 1e6 / 8
        self.up, self.down = Bucket(rate), Bucket(rate)
        """``up``: from the clients to the target; ``down``: back."""
        self.port = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accepted, LOOPBACK, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._relay(reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            # The handshake's round trip, before the target hears of the connection.
            await asyncio.sleep(2 * self.delay)
            try:
                target_reader, target_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return  # the far side is down: the client sees its connection closed
            def abort() -> None:
                client_writer.close()
                target_writer.close()

            try:
                up = _Direction(client_reader, target_writer, self.up, self.delay, abort)
                down = _Direction(target_reader, client_writer, self.down, self.delay, abort)
                await asyncio.gather(up.read(), up.write(), down.read(), down.write())
            finally:
                target_writer.close()
        finally:
            client_writer.close()


def reached(port: int, link: tuple[float, float | None] | None, stack: contextlib.ExitStack) -> int:
    """The port a peer reaches loopback's ``port`` at: through a :func:`link_process` (one-way delay in seconds,
    Mbit/s or None) that lives as long as ``stack``, or ``port`` itself when there is no link."""
    if link is None:
        return port
    delay, mbit = link
    return stack.enter_context(link_process((LOOPBACK, port), delay=delay, mbit=mbit))


@contextlib.contextmanager
def link_process(target: tuple[str, int], *, delay: float = 0.0, mbit: float | None = None) -> Iterator[int]:
    """A :class:`Link` in a child process, for as long as the block runs: yields its port."""
    argv = [sys.executable, "-m", "testbed.link", "--target", f"{target[0]}:{target[1]}", "--delay", str(delay)]
    if mbit is not None:
        argv += ["--mbit", str(mbit)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("listening "):
            raise RuntimeError(f"the link did not start: {line!r} (exit {process.poll()})")
        yield int(line.split()[1])
    finally:
        process.terminate()
        try:
            process.wait(START_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def _serve(target: tuple[str, int], delay: float, mbit: float | None) -> None:
    link = Link(target, delay=delay, mbit=mbit)
    print(f"listening {await link.start()}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await link.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="HOST:PORT the link leads to")
    parser.add_argument("--delay", type=float, default=0.0, help="one-way delay, seconds")
    parser.add_argument("--mbit", type=float, default=None, help="megabits per second each way (none: no cap)")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve((host, int(port)), args.delay, args.mbit))


if __name__ == "__main__":
    main()
