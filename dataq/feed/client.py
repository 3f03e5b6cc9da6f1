"""The feeder: sends records to a push daemon with a window of records in flight, and survives lost connections.

:class:`Feeder` is the library (the ``dataq feed`` command, the benchmark and end-to-end tests use it): give it
an iterable of Records or record lines, get back a :class:`FeedResult` with every reply in input order. It
keeps up to ``window`` records sent but unanswered; when the connection drops it reconnects with backoff and
sends every unanswered record again, which the daemon's de-duplication makes safe (such a record may then come
back ``Ignored`` although this feeder's first attempt stored it). Each connection opens with the handshake
(:mod:`dataq.handshake`): lines go in the forms the daemon said it speaks, or the 2014 forms to one that did not
answer it.

Several push daemons may be given (the seed's ``highAvailabilitySites``): they are tried in order, and one that
refuses the connection, does not accept it within ``timeout`` or, with records waiting, stays silent that long
is left for the next. After ``failback_after`` seconds on another, the feeder finishes what it has in flight
there and goes back to the first. An outage is logged when it starts and when it ends, not at every retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from collections.abc import AsyncIterable, Callable, Iterable, Sequence

from dataq.addresses import host_port_text
from dataq.errors import ProtocolError
from dataq.feed.failover import Failover, Step
from dataq.feed.link import (
    FeedChunk,
    FeedError,
    FeedItem,
    FeedResult,
    LinkCallback,
    LinkState,
    client_tls_context,
)
from dataq.feed.source import PRODUCER_CHUNKS, Chunk, Entry, draw
from dataq.handshake import Capability, Greeting, PeerBook, greet
from dataq.logs import get_logger
from dataq.protocol import PUSHED_PREFIX, LineFramer, OverLong, Reply, parse_reply
from dataq.record import form_for
from dataq.runtime.backoff import Backoff

DEFAULT_WINDOW = 1000
"""Records sent and not yet answered."""
DEFAULT_RETRY_FOR = 60.0
"""Seconds of failing to (re)connect after which a feeder gives up."""
CONNECT_TIMEOUT = 10.0
"""Seconds a push daemon has to accept a connection (and, with several, to answer a record) before the next is
tried."""
FAILBACK_AFTER = 60.0
"""Seconds spent on a later push daemon before the first is tried again."""
READ_CHUNK = 256 * 1024
RESEND_LOG_EVERY = 1000
"""A resend is logged once per this many (a replica can be missing for a long time)."""
MAX_REPLY_BYTES = 4096
"""Longest reply line accepted (error replies are capped well below this by the daemon)."""

ReplyCallback = Callable[[int, Reply], None]
"""Called with the item's index (0-based, input order) and its reply, as replies arrive."""
Target = tuple[str, int]

log = get_logger()


class _ConnectionLost(Exception):
    """The connection ended before every record was answered; reconnect and resend."""


class _SourceFailed(Exception):
    """Reading the items failed (the cause says how); the feed ends with that error."""




class Feeder:
    """Feeds records to one push daemon over one connection at a time (see the module's docstring).

    A task draws from the source for the whole feed (:mod:`dataq.feed.source`).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        also: Sequence[Target] = (),
        window: int = DEFAULT_WINDOW,
        tls: ssl.SSLContext | None = None,
        retry_for: float = DEFAULT_RETRY_FOR,
        timeout: float = CONNECT_TIMEOUT,
        failback_after: float = FAILBACK_AFTER,
        backoff_cap: float | None = None,
        keep_replies: bool = True,
        on_reply: ReplyCallback | None = None,
        on_link: LinkCallback | None = None,
        peers: PeerBook | None = None,
    ) -> None:
        """Feed ``host:port``, or the first of it and ``also`` that answers; ``retry_for`` may be infinite.
        ``peers`` keeps what each push daemon said in the handshake (shared with others that talk to them)."""
        if window < 1:
            raise ValueError("window must be at least 1")
        if not timeout > 0 or not failback_after > 0:
            raise ValueError("timeout and failback_after must be positive")
        self.targets: list[Target] = [(host, port), *also]
        self.host, self.port, self.window, self.tls = host, port, window, tls
        self.retry_for, self.keep_replies, self.on_reply = retry_for, keep_replies, on_reply
        self.timeout, self.failback_after = timeout, failback_after
        self.backoff_cap = backoff_cap
        self._failover: Failover | None = None
        self._link = LinkState(len(self.targets), on_link)
        self._quiet_since = 0.0
        """When the oldest record in flight was sent, or the last reply came (the silence timer's start)."""
        self._in_flight: deque[Entry] = deque()
        self._carry: deque[Entry] = deque()
        self._chunks: asyncio.Queue[Chunk] = asyncio.Queue(PRODUCER_CHUNKS)
        self._source_done = False
        self._room = asyncio.Event()
        self._result = FeedResult()
        self.peers = peers if peers is not None else PeerBook()
        self.greeting: Greeting | None = None
        """What the push daemon of the current (or last) connection said in the handshake."""
        self._speaks: frozenset[Capability] | None = None
        """What both sides speak on this connection, when it is less than all this version does: each line then
        goes in the form the daemon takes (:func:`~dataq.record.form_for`); None: lines go as they are."""

    @property
    def result(self) -> FeedResult:
        """The counts so far (the progress of a feed under way)."""
        return self._result

    @property
    def _exhausted(self) -> bool:
        """Every item has been sent at least once."""
        return self._source_done and not self._carry

    @property
    def _finished(self) -> bool:
        """Every item has been sent and answered."""
        return self._exhausted and not self._in_flight

    @property
    def _leaving(self) -> bool:
        """This connection is being left for the first push daemon (see :mod:`.failover`)."""
        return self._failover is not None and self._failover.leaving

    @property
    def _may_leave(self) -> bool:
        """This connection has nothing more to do: all is answered, or it is being left and has nothing in flight."""
        return not self._in_flight and (self._exhausted or self._leaving)

    async def feed(self, items: Iterable[FeedItem] | AsyncIterable[FeedItem | FeedChunk]) -> FeedResult:
        """Send every item and wait for every reply; raises FeedError if the daemon stays unreachable. An async
        source may give a list of items it has at once (:data:`FeedChunk`): each counts as one item."""
        self._result = result = FeedResult(replies=[] if self.keep_replies else None)
        self._in_flight.clear()
        self._carry.clear()
        self._chunks = asyncio.Queue(PRODUCER_CHUNKS)
        self._source_done = False
        started = time.perf_counter()
        producer = asyncio.create_task(draw(items, self._chunks, self._record), name="feeder-source")
        try:
            await self._run_connections()
        except _SourceFailed as exc:
            assert exc.__cause__ is not None
            raise exc.__cause__ from None
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer
            result.elapsed = time.perf_counter() - started
        return result

    async def _run_connections(self) -> None:
        failover = self._failover = Failover(
            [f"{host}:{port}" for host, port in self.targets], retry_for=self.retry_for,
            failback_after=self.failback_after,
            backoff=Backoff() if self.backoff_cap is None else Backoff(cap=self.backoff_cap))
        while not self._finished:
            host, port = self.host, self.port = self.targets[failover.current]
            try:
                async with asyncio.timeout(self.timeout):
                    reader, writer = await asyncio.open_connection(host, port, ssl=self.tls, limit=READ_CHUNK)
            except (OSError, TimeoutError) as exc:
                self._link.check_tls(exc, host, port)
                error = f"cannot connect: {str(exc) or f'no connection within {self.timeout:g} s'}"
                await self._next(failover.connect_failed(time.monotonic(), error), host, port, error)
                continue
            failover.connected(time.monotonic())
            self._link.up(host, port)
            answered = self._result.total
            try:
                await self._converse(reader, writer)
            except _ConnectionLost as exc:
                self._link.check_tls(exc.__cause__, host, port)
                self._result.reconnects += 1
                error = f"connection lost: {exc}"
                step = failover.lost(time.monotonic(), error, progressed=self._result.total > answered)
                await self._next(step, host, port, error, unanswered=len(self._in_flight))
                continue
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()
            if failover.ended() is not None:
                log.debug("trying the first push daemon again", left=f"{host}:{port}",
                          first=f"{self.targets[0][0]}:{self.targets[0][1]}")

    async def _next(self, step: Step, host: str, port: int, error: str, **details: object) -> None:
        """Report the failure that led to ``step`` and wait its delay."""
        if step.failure:
            self._link.failed(host, port, error, **details)
        else:
            log.debug("the first push daemon is still away", target=f"{host}:{port}", error=error)
        if step.delay:
            await asyncio.sleep(step.delay)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: the handshake, then send (resending what is unanswered first) and read replies until
        all are answered, or until it is being left and what was sent is answered."""
        await self._greet(reader, writer)
        sender = asyncio.create_task(self._send(writer))
        receiver = asyncio.create_task(self._receive(reader))
        try:
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done:
                sender.result()
                if self._in_flight:  # everything is sent: the rest is waiting for replies
                    await receiver
            else:
                receiver.result()
        except (OSError, ssl.SSLError) as exc:
            raise _ConnectionLost(str(exc) or type(exc).__name__) from exc
        finally:
            for task in (sender, receiver):
                task.cancel()
            await asyncio.gather(sender, receiver, return_exceptions=True)
        if not self._may_leave:
            raise _ConnectionLost("connection closed by the daemon")

    async def _greet(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Learn what the push daemon speaks (:mod:`dataq.handshake`). With another push daemon to go to, one
        that does not answer within ``timeout`` is left for it; a lone one is waited for, as for its replies."""
        try:
            greeting = await greet(reader, writer, self.timeout if len(self.targets) > 1 else None)
        except TimeoutError:
            raise _ConnectionLost(f"no answer to the handshake within {self.timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise _ConnectionLost(str(exc) or type(exc).__name__) from exc
        except ProtocolError as exc:  # a malformed hello: left as a daemon that cannot be talked to, for the next
            raise _ConnectionLost(str(exc)) from exc
        self.greeting = greeting
        self.peers[host_port_text(self.host, self.port)].learned(greeting)
        self._speaks = None if greeting.full else greeting.capabilities

    def _wire(self, line: bytes) -> bytes:
        """``line`` in the form this connection's push daemon takes."""
        speaks = self._speaks
        return line if speaks is None else form_for(line, speaks)

    async def _send(self, writer: asyncio.StreamWriter) -> None:
        in_flight, carry, failover = self._in_flight, self._carry, self._failover
        assert failover is not None
        self._quiet_since = time.monotonic()
        if in_flight:
            writer.write(b"".join(self._wire(line) for _, line, _ in in_flight))
            await writer.drain()
        # Until every record is answered, not only sent: a reply may ask to send a record again.
        while not self._may_leave:
            leaving = failover.leave_due(time.monotonic())  # then: take nothing new, finish what is in flight
            room = self.window - len(in_flight)
            if room <= 0 or self._exhausted or leaving:
                self._room.clear()
                await self._room.wait()
                continue
            if not carry:
                try:
                    async with asyncio.timeout(failover.leave_in(time.monotonic())):
                        chunk = await self._chunks.get()
                except TimeoutError:
                    continue
                self._accept(chunk)
                while len(carry) < room and not self._chunks.empty():
                    self._accept(self._chunks.get_nowait())
            lines: list[bytes] = []
            if not in_flight:
                self._quiet_since = time.monotonic()
            speaks = self._speaks
            for _ in range(min(room, len(carry))):
                entry = carry.popleft()
                in_flight.append(entry)
                lines.append(entry[1] if speaks is None else form_for(entry[1], speaks))
            if lines:
                writer.write(b"".join(lines))
                await writer.drain()
        self._room.set()

    def _accept(self, chunk: Chunk) -> None:
        if chunk is None:
            self._source_done = True
        elif isinstance(chunk, BaseException):
            raise _SourceFailed() from chunk
        else:
            self._carry.extend(chunk)

    async def _receive(self, reader: asyncio.StreamReader) -> None:
        framer = LineFramer(MAX_REPLY_BYTES)
        in_flight, result = self._in_flight, self._result
        # Nobody looks at single replies: count the common one without building a Reply (the benchmark's case).
        count_only = result.replies is None and self.on_reply is None
        # With another push daemon to go to, one that sits on records is left for it: silent for ``timeout``
        # seconds since the oldest record in flight was sent, or since the last reply.
        silence = self.timeout if len(self.targets) > 1 else None
        while not self._may_leave:
            wait = None if silence is None else (
                max(0.0, self._quiet_since + silence - time.monotonic()) if in_flight else silence)
            try:
                async with asyncio.timeout(wait) as timer:
                    data = await reader.read(READ_CHUNK)
            except TimeoutError as exc:
                if silence is None or not timer.expired():  # the socket's own (ETIMEDOUT): the connection is gone
                    raise _ConnectionLost(str(exc) or "connection timed out") from exc
                if in_flight and time.monotonic() - self._quiet_since >= silence:
                    raise _ConnectionLost(f"no reply within {silence:g} s") from None
                continue
            self._quiet_since = time.monotonic()
            if not data:
                return
            for line in framer.feed(data):
                if count_only and type(line) is bytes and line[:_PUSHED_LENGTH] == _PUSHED and in_flight:
                    expected = in_flight.popleft()[2]
                    if expected is not None and line[_PUSHED_LENGTH:].decode() != expected:
                        raise ProtocolError(f"reply {line!r} answers a record other than {expected}")
                    result.pushed += 1
                    continue
                if isinstance(line, OverLong):
                    raise ProtocolError(f"reply longer than {MAX_REPLY_BYTES} bytes from {self.host}:{self.port}")
                reply = parse_reply(line)
                if reply.refuses_connection:
                    raise _ConnectionLost(reply.detail)
                if not in_flight:
                    raise ProtocolError(f"unexpected reply {str(reply)!r}: no record is waiting for one")
                entry = in_flight.popleft()
                index, _, expected = entry
                if expected is not None and reply.ok and reply.detail != expected:
                    raise ProtocolError(f"reply {str(reply)!r} answers a record other than {expected}")
                if reply.asks_to_resend:
                    self._resend(entry, reply)
                    continue
                self._record(index, reply)
            if len(in_flight) < self.window or not in_flight:
                self._room.set()

    def _resend(self, entry: Entry, reply: Reply) -> None:
        """Send the record again: the daemon stored it, maybe, but could not yet promise to keep it."""
        if self._result.resent % RESEND_LOG_EVERY == 0:
            log.warning("the push daemon asks to send records again; resending", reason=reply.detail,
                        resent_so_far=self._result.resent)
        self._result.resent += 1
        self._carry.appendleft(entry)

    def _record(self, index: int, reply: Reply) -> None:
        self._result.record(index, reply)
        if self.on_reply is not None:
            self.on_reply(index, reply)

_PUSHED = PUSHED_PREFIX.encode()
_PUSHED_LENGTH = len(_PUSHED)


__all__ = ["CONNECT_TIMEOUT", "DEFAULT_RETRY_FOR", "DEFAULT_WINDOW", "FAILBACK_AFTER", "FeedError", "FeedItem",
           "FeedResult", "Feeder", "Target", "client_tls_context"]
