"""One connection to a next site's push daemon, kept open and pipelined: hand-ons and receipts queries of many
records travel on it at once, and their answers come back in the order the lines went.

A hand-on used to open a connection of its own: a round trip to connect, one for the handshake, one for its
reply, and a TLS handshake when configured. Over a 150 ms link that is half a second per record, however many run
at once. Here every line sent while the connection is busy goes out in the next write (batched as a feeder's
window is), and the connection is greeted once, its handshake kept in the site's :class:`~dataq.handshake.Peer`,
as GridFTP's pipelining keeps many requests in flight on one control channel.

Each request says how many answer lines it takes (a record line one, a receipts query one per id), so the
reader hands each request its own lines. A request is composed only once the connection is greeted, in the form
the peer speaks (its handshake); a peer that does not speak what a request needs refuses it before anything is
written (:class:`~dataq.custody.client.NotSpoken`).

The connection is dropped when the peer stays silent for ``timeout`` seconds with something in flight, when it
closes, or after :data:`IDLE_CLOSE` seconds with nothing to do (the push daemon reaps idle connections too).
Requests in flight on a dropped connection are sent once more on a new one if the connection had answered
before (a peer that closed an idle connection as a request went out: nothing was lost, and a record pushed twice
is answered ``Ignored``); otherwise they fail with :class:`LinkLost`, and the caller tries the next site or waits
for the outage to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from dataq.errors import DataqError, ProtocolError
from dataq.feed.link import FeedError, raise_if_tls_refused
from dataq.handshake import Greeting, Peer, greet
from dataq.logs import get_logger
from dataq.protocol import LineFramer, OverLong

IDLE_CLOSE = 30.0
"""Seconds a link with nothing in flight stays open: a trickle of hand-ons keeps it, a site at rest lets it go
(the push daemon's own ``idle_timeout`` is longer, 300 s by default)."""
WINDOW = 1000
"""Answer lines awaited at most on a link (a feeder's window): more wait to be written."""
READ_BYTES = 1 << 16
MAX_ANSWER_BYTES = 1 << 20
"""The longest answer line taken (one receipts answer along a chain of 16 sites is a few KB)."""
RESENDS = 1
"""Times a request in flight on a connection that dropped is sent again on a new one."""

Compose = Callable[[Greeting], bytes]
"""Builds a request's lines (each with its newline) in the form the peer speaks; raises DataqError to refuse it."""
Check = Callable[[list[bytes]], None]
"""Raises ProtocolError if a request's answer lines are not about what it asked (the connection's answers are
then out of step with its requests: it is dropped, and nothing more is read from it)."""

log = get_logger()


class LinkLost(FeedError):
    """The next site could not be reached, stayed silent, or dropped the connection before answering."""


@dataclass(eq=False)
class Request:
    """Lines to send and the answer lines they take."""

    compose: Compose
    answers: int
    future: asyncio.Future[tuple[list[bytes], Greeting]]
    check: Check | None = None
    got: list[bytes] = field(default_factory=list)
    sent: int = 0
    """Times it was written."""


class SiteLink:
    """A kept connection to one push daemon (see the module's docstring)."""

    def __init__(self, host: str, port: int, *, tls: ssl.SSLContext | None, timeout: float, peer: Peer,
                 idle: float = IDLE_CLOSE, window: int = WINDOW) -> None:
        self.host, self.port, self.tls, self.timeout, self.peer = host, port, tls, timeout, peer
        self.idle, self.window = idle, window
        self._waiting: deque[Request] = deque()
        """Requests not written yet."""
        self._in_flight: deque[Request] = deque()
        """Requests written, in order, whose answers have not all come."""
        self._awaited = 0
        """Answer lines awaited by the requests in flight."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connections = 0
        """Connections made so far (each greeted once)."""
        self._answered = False
        """The current connection has answered a request."""
        self._silence: asyncio.Timeout | None = None
        """The deadline of the read under way (None: no read under way). It has no time set while nothing was due
        when the read began and nothing has been written since; the next write sets it."""
        self.last_error: str | None = None
        """Why the last connection could not be made or was dropped (None: the last one worked)."""
        self.failed_at: float | None = None
        """When (monotonic) a connection last could not be made; None once one is made."""
        self.failed_connects = 0
        """Connections that could not be made since the last one was."""

    @property
    def name(self) -> str:
        return self.peer.name

    @property
    def open(self) -> bool:
        return self._task is not None and not self._task.done()

    async def request(self, compose: Compose, answers: int,
                      check: Check | None = None) -> tuple[list[bytes], Greeting]:
        """Send the lines ``compose`` makes and wait for their ``answers`` answer lines; the peer's greeting
        comes with them. LinkLost if the connection fails first, ProtocolError if the peer breaks the protocol,
        what ``compose`` raises. Cancelling the caller leaves its answers to be read and dropped."""
        future: asyncio.Future[tuple[list[bytes], Greeting]] = asyncio.get_running_loop().create_future()
        request = Request(compose, answers, future, check)
        self._waiting.append(request)
        self._wake.set()
        if not self.open:
            self._start()
        try:
            return await future
        finally:
            if future.cancelled() and request in self._waiting:
                self._waiting.remove(request)

    def _start(self) -> None:
        self._task = task = asyncio.create_task(self._serve(), name=f"link to {self.name}")
        task.add_done_callback(self._served)

    def _served(self, task: asyncio.Task[None]) -> None:
        """The connections' task ended: requests that came while it was closing its last connection get a new
        one; a bug in it fails the requests instead of leaving them waiting."""
        if task.cancelled():
            return
        if (error := task.exception()) is not None:
            log.error("the link to the next site failed", site=self.name, error=repr(error))
            self._fail_all(LinkLost(f"{self.name}: the link failed: {error!r}"))
        elif self._waiting and self._task is task:
            self._start()

    async def close(self) -> None:
        """Drop the connection; requests still waiting fail with LinkLost."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_all(LinkLost(f"the link to {self.name} is closed"))

    async def _serve(self) -> None:
        """Connections, one after another, for as long as there are requests: a connection that cannot be made
        fails them all; one dropped sends what was in flight once more on the next, if it had answered before."""
        while self._waiting or self._in_flight:
            try:
                reader, writer, greeting = await self._connect()
            except DataqError as exc:
                self._fail_all(exc)
                return
            self._answered = False
            try:
                await self._converse(reader, writer, greeting)
            except (LinkLost, ProtocolError) as exc:
                self.last_error = str(exc)
                lost = LinkLost(f"{self.name}: {exc}") if isinstance(exc, LinkLost) else exc
                log.info("the link to the next site dropped", site=self.name, error=str(exc),
                         in_flight=len(self._in_flight))
                if not self._answered:
                    # It answered nothing: no second connection for the same requests at once.
                    self._fail_all(lost)
                    return
                self._requeue(lost, retry=isinstance(exc, LinkLost))
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Greeting]:
        """A new connection, greeted; LinkLost (or FeedError, for a certificate refused) if it cannot be made."""
        host, port = self.host, self.port
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            async with asyncio.timeout_at(deadline):
                reader, writer = await asyncio.open_connection(host, port, ssl=self.tls, limit=READ_BYTES)
        except TimeoutError:
            raise self._down(f"cannot connect: no connection within {self.timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            lost = self._down(f"cannot connect: {exc}")
            raise_if_tls_refused(exc, host, port)  # a certificate refused: said as the error it is
            raise lost from exc
        try:
            async with asyncio.timeout_at(deadline):
                greeting = await greet(reader, writer, None)
        except BaseException as exc:
            writer.close()
            if isinstance(exc, TimeoutError):
                raise self._down(f"no answer to the handshake within {self.timeout:g} s") from None
            if isinstance(exc, ProtocolError):
                raise self._down(str(exc)) from exc
            if isinstance(exc, (OSError, ssl.SSLError, asyncio.IncompleteReadError)):
                lost = self._down(f"connection lost during the handshake: {exc}")
                raise_if_tls_refused(exc, host, port)
                raise lost from exc
            raise
        self.peer.learned(greeting)
        self.connections += 1
        self.failed_at = self.last_error = None
        self.failed_connects = 0
        return reader, writer, greeting

    def _down(self, error: str) -> LinkLost:
        self.failed_at, self.last_error = time.monotonic(), error
        self.failed_connects += 1
        return LinkLost(f"{self.name}: {error}")

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        greeting: Greeting) -> None:
        """Write requests and read their answers until idle. LinkLost if the connection drops."""
        sender = asyncio.create_task(self._send(writer, greeting))
        receiver = asyncio.create_task(self._receive(reader, greeting))
        try:
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        except (OSError, ssl.SSLError) as exc:
            raise LinkLost(f"connection lost: {exc or type(exc).__name__}") from exc
        finally:
            for task in (sender, receiver):
                task.cancel()
            await asyncio.gather(sender, receiver, return_exceptions=True)

    async def _send(self, writer: asyncio.StreamWriter, greeting: Greeting) -> None:
        """Write what waits, as much at once as the window leaves room for; return once idle for ``idle``."""
        waiting, in_flight = self._waiting, self._in_flight
        while True:
            if not waiting or self._awaited >= self.window:
                self._wake.clear()
                if not waiting and not in_flight:
                    try:
                        async with asyncio.timeout(self.idle):
                            await self._wake.wait()
                    except TimeoutError:
                        if not waiting and not in_flight:
                            return
                    continue
                await self._wake.wait()
                continue
            chunks: list[bytes] = []
            while waiting and self._awaited < self.window:
                request = waiting.popleft()
                if request.future.done():
                    continue
                try:
                    lines = request.compose(greeting)
                except Exception as exc:  # refused (the peer does not speak it), or its caller's bug: it alone fails
                    request.future.set_exception(exc)
                    continue
                request.sent += 1
                chunks.append(lines)
                in_flight.append(request)
                self._awaited += request.answers - len(request.got)
            if chunks:
                writer.write(b"".join(chunks))
                silence = self._silence
                if silence is not None and silence.when() is None:
                    silence.reschedule(asyncio.get_running_loop().time() + self.timeout)
                await writer.drain()

    async def _receive(self, reader: asyncio.StreamReader, greeting: Greeting) -> None:
        framer = LineFramer(MAX_ANSWER_BYTES)
        in_flight = self._in_flight
        while True:
            try:
                # Silent for ``timeout`` with answers due: the peer sits on them (or the link is gone). A read
                # that began with nothing due is given its deadline by the write that follows (:meth:`_send`).
                async with asyncio.timeout(None) as silence:
                    self._silence = silence
                    if in_flight:
                        silence.reschedule(asyncio.get_running_loop().time() + self.timeout)
                    data = await reader.read(READ_BYTES)
            except TimeoutError:
                raise LinkLost(f"no answer within {self.timeout:g} s") from None
            finally:
                self._silence = None  # a finished deadline cannot be moved
            if not data:
                raise LinkLost("the connection closed")
            for line in framer.feed(data):
                if isinstance(line, OverLong):
                    raise ProtocolError(f"{self.name} sent an answer longer than {MAX_ANSWER_BYTES} bytes")
                if not in_flight:
                    raise ProtocolError(f"{self.name} sent an answer no request waits for: {line[:200]!r}")
                request = in_flight[0]
                request.got.append(line)
                self._awaited -= 1
                if len(request.got) == request.answers:
                    if request.check is not None:
                        request.check(request.got)  # ProtocolError: out of step, the connection is dropped
                    in_flight.popleft()
                    self._answered = True
                    if not request.future.done():
                        request.future.set_result((request.got, greeting))
            self._wake.set()

    def _requeue(self, error: Exception, *, retry: bool) -> None:
        """After a dropped connection: what was in flight goes first again (if it may be sent once more), the
        rest fails with ``error``."""
        again = []
        for request in self._in_flight:
            if request.future.done():
                continue
            if retry and request.sent <= RESENDS:
                request.got.clear()
                again.append(request)
            else:
                request.future.set_exception(error)
        self._in_flight.clear()
        self._awaited = 0
        self._waiting.extendleft(reversed(again))

    def _fail_all(self, error: Exception) -> None:
        for request in (*self._in_flight, *self._waiting):
            if not request.future.done():
                request.future.set_exception(error)
        self._in_flight.clear()
        self._waiting.clear()
        self._awaited = 0
