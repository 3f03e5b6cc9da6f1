"""The feeder: sends records to a push daemon with a window of records in flight, and survives lost connections.

:class:`Feeder` is the library (the ``dataq feed`` command, the benchmark and end-to-end tests use it): give it
an iterable of Records or record lines, get back a :class:`FeedResult` with every reply in input order. It
keeps up to ``window`` records sent but unanswered; when the connection drops it reconnects with backoff and
sends every unanswered record again, which the daemon's de-duplication makes safe (such a record may then come
back ``Ignored`` although this feeder's first attempt stored it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field

from dataq.errors import DataqError, ProtocolError
from dataq.logs import get_logger
from dataq.protocol import PUSHED_PREFIX, LineFramer, OverLong, Reply, ReplyKind, parse_reply
from dataq.record import Record, format_line
from dataq.runtime.backoff import Backoff

DEFAULT_WINDOW = 1000
"""Records sent and not yet answered."""
DEFAULT_RETRY_FOR = 60.0
"""Seconds of failing to (re)connect after which a feeder gives up."""
CONNECT_TIMEOUT = 10.0
READ_CHUNK = 256 * 1024
RESEND_LOG_EVERY = 1000
"""A resend is logged once per this many (a replica can be missing for a long time)."""
PRODUCER_CHUNK = 256
"""Items of a synchronous source handed to the sender at once (an async source's go one by one)."""
PRODUCER_CHUNKS = 16
"""Chunks drawn from the source ahead of the sender."""
MAX_REPLY_BYTES = 4096
"""Longest reply line accepted (error replies are capped well below this by the daemon)."""

FeedItem = Record | str | bytes
"""What a feeder sends: a Record, or a record line in either wire form (without its newline)."""
ReplyCallback = Callable[[int, Reply], None]
"""Called with the item's index (0-based, input order) and its reply, as replies arrive."""

log = get_logger()


class FeedError(DataqError):
    """The feeder could not reach the push daemon (for longer than it was willing to retry) or talk TLS with it."""


class _ConnectionLost(Exception):
    """The connection ended before every record was answered; reconnect and resend."""


class _SourceFailed(Exception):
    """Reading the items failed (the cause says how); the feed ends with that error."""


@dataclass(slots=True)
class FeedResult:
    """What became of the records fed: counts, time, and (unless turned off) every reply in input order."""

    pushed: int = 0
    ignored: int = 0
    errors: int = 0
    elapsed: float = 0.0
    reconnects: int = 0
    resent: int = 0
    """Records sent again because the daemon asked for it (not replicated in time)."""
    replies: list[Reply] | None = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.pushed + self.ignored + self.errors

    @property
    def ok(self) -> bool:
        """No record was refused."""
        return self.errors == 0

    @property
    def rate(self) -> float:
        """Records answered per second."""
        return self.total / self.elapsed if self.elapsed > 0 else 0.0

    def summary(self) -> str:
        return (f"pushed {self.pushed}, ignored {self.ignored}, errors {self.errors} in {self.elapsed:.2f} s "
                f"({self.rate:,.0f} records/s)" + (f", {self.reconnects} reconnects" if self.reconnects else ""))


def client_tls_context(ca: str | None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """A context that verifies the daemon against ``ca`` (system CAs if None) and shows ``cert`` if given."""
    context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise DataqError(f"cannot load the client certificate {cert}: {exc}") from exc
    return context


def _raise_if_tls_refused(exc: BaseException | None, host: str, port: int) -> None:
    """A TLS failure other than a dropped connection (a certificate refused by either side) will not go away
    by retrying: end the feed with it."""
    if isinstance(exc, ssl.SSLError) and not isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        raise FeedError(f"TLS with the push daemon at {host}:{port} failed: {exc.reason or exc}") from exc


def _encode(item: FeedItem) -> tuple[bytes, str | None] | Reply:
    """The line to send (with its newline) and the id a reply must name; a Reply if it cannot be sent."""
    try:
        # A path from os.walk may hold undecodable bytes (as surrogate escapes): they go out as they are, and
        # the daemon refuses that one record instead of the feeder failing.
        if isinstance(item, Record):
            return (format_line(item) + "\n").encode("utf-8", "surrogateescape"), item.checksum
        line = item.encode("utf-8", "surrogateescape") if isinstance(item, str) else item
    except UnicodeEncodeError as exc:
        return Reply(ReplyKind.ERROR, f"line cannot be encoded: {exc.reason}")
    if line.endswith(b"\n"):
        line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
    if b"\n" in line:
        return Reply(ReplyKind.ERROR, "line contains a newline (one record per line)")
    return line + b"\n", None


_Entry = tuple[int, bytes, str | None]
"""An item ready to send: its index, its line, and the id its reply must name (None: not checked)."""
_Chunk = list[_Entry] | BaseException | None
"""What the producer hands the sender: entries, the error that stopped the source, or None at its end."""


class Feeder:
    """Feeds records to one push daemon over one connection at a time (see the module's docstring).

    A producer task draws from the source for the whole feed, so a connection that fails never interrupts the
    source mid-item (cancelling an async generator would end it for good).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        window: int = DEFAULT_WINDOW,
        tls: ssl.SSLContext | None = None,
        retry_for: float = DEFAULT_RETRY_FOR,
        keep_replies: bool = True,
        on_reply: ReplyCallback | None = None,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.host, self.port, self.window, self.tls = host, port, window, tls
        self.retry_for, self.keep_replies, self.on_reply = retry_for, keep_replies, on_reply
        self._in_flight: deque[_Entry] = deque()
        self._carry: deque[_Entry] = deque()
        self._chunks: asyncio.Queue[_Chunk] = asyncio.Queue(PRODUCER_CHUNKS)
        self._source_done = False
        self._room = asyncio.Event()
        self._result = FeedResult()

    @property
    def result(self) -> FeedResult:
        """The counts so far (the progress of a feed under way)."""
        return self._result

    @property
    def _exhausted(self) -> bool:
        """Every item has been sent at least once."""
        return self._source_done and not self._carry

    async def feed(self, items: Iterable[FeedItem] | AsyncIterable[FeedItem]) -> FeedResult:
        """Send every item and wait for every reply; raises FeedError if the daemon stays unreachable."""
        self._result = result = FeedResult(replies=[] if self.keep_replies else None)
        self._in_flight.clear()
        self._carry.clear()
        self._chunks = asyncio.Queue(PRODUCER_CHUNKS)
        self._source_done = False
        started = time.perf_counter()
        producer = asyncio.create_task(self._produce(items), name="feeder-source")
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
        backoff = Backoff()
        failing_since: float | None = None
        while not (self._exhausted and not self._in_flight):
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, ssl=self.tls, limit=READ_CHUNK), CONNECT_TIMEOUT
                )
            except (OSError, TimeoutError) as exc:
                _raise_if_tls_refused(exc, self.host, self.port)
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.retry_for:
                    raise FeedError(f"cannot reach the push daemon at {self.host}:{self.port}: {exc}") from exc
                log.warning("cannot connect to the push daemon; retrying", host=self.host, port=self.port,
                            error=str(exc))
                await backoff.wait()
                continue
            answered = self._result.total
            try:
                await self._converse(reader, writer)
            except _ConnectionLost as exc:
                _raise_if_tls_refused(exc.__cause__, self.host, self.port)
                self._result.reconnects += 1
                if self._result.total > answered:  # that connection made progress: a fresh failure
                    failing_since = None
                    backoff.reset()
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.retry_for:
                    raise FeedError(f"the push daemon at {self.host}:{self.port} keeps dropping the "
                                    f"connection: {exc}") from exc
                log.warning("connection to the push daemon lost; resending what was not answered",
                            error=str(exc), unanswered=len(self._in_flight))
                await backoff.wait()
                continue
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()
            failing_since = None
            backoff.reset()

    async def _produce(self, items: Iterable[FeedItem] | AsyncIterable[FeedItem]) -> None:
        """Draw every item from the source into the queue of chunks (refusing the unsendable ones at once)."""
        index = 0
        try:
            if isinstance(items, AsyncIterable):
                # One item at a time: an async source may be slow, and what it has given must go out at once.
                async for item in items:
                    entry = self._prepare(index, item)
                    index += 1
                    if entry is not None:
                        await self._chunks.put([entry])
            else:
                chunk: list[_Entry] = []
                for item in items:
                    entry = self._prepare(index, item)
                    index += 1
                    if entry is not None:
                        chunk.append(entry)
                        if len(chunk) >= PRODUCER_CHUNK:
                            await self._chunks.put(chunk)
                            chunk = []
                if chunk:
                    await self._chunks.put(chunk)
        except Exception as exc:
            await self._chunks.put(exc)
            return
        await self._chunks.put(None)

    def _prepare(self, index: int, item: FeedItem) -> _Entry | None:
        encoded = _encode(item)
        if isinstance(encoded, Reply):
            self._record(index, encoded)
            return None
        return index, encoded[0], encoded[1]

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: send (resending what is unanswered first) and read replies until all are answered."""
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
        if not (self._exhausted and not self._in_flight):
            raise _ConnectionLost("connection closed by the daemon")

    async def _send(self, writer: asyncio.StreamWriter) -> None:
        in_flight, carry = self._in_flight, self._carry
        if in_flight:
            writer.write(b"".join(line for _, line, _ in in_flight))
            await writer.drain()
        # Until every record is answered, not only sent: a reply may ask to send a record again.
        while not (self._exhausted and not in_flight):
            room = self.window - len(in_flight)
            if room <= 0 or self._exhausted:
                self._room.clear()
                await self._room.wait()
                continue
            if not carry:
                self._accept(await self._chunks.get())
                while len(carry) < room and not self._chunks.empty():
                    self._accept(self._chunks.get_nowait())
            lines: list[bytes] = []
            for _ in range(min(room, len(carry))):
                entry = carry.popleft()
                in_flight.append(entry)
                lines.append(entry[1])
            if lines:
                writer.write(b"".join(lines))
                await writer.drain()
        self._room.set()

    def _accept(self, chunk: _Chunk) -> None:
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
        while not (self._exhausted and not in_flight):
            data = await reader.read(READ_CHUNK)
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
            if len(in_flight) < self.window:
                self._room.set()

    def _resend(self, entry: _Entry, reply: Reply) -> None:
        """Send the record again: the daemon stored it, maybe, but could not yet promise to keep it."""
        if self._result.resent % RESEND_LOG_EVERY == 0:
            log.warning("the push daemon asks to send records again; resending", reason=reply.detail,
                        resent_so_far=self._result.resent)
        self._result.resent += 1
        self._carry.appendleft(entry)

    def _record(self, index: int, reply: Reply) -> None:
        result = self._result
        if reply.kind is ReplyKind.PUSHED:
            result.pushed += 1
        elif reply.kind is ReplyKind.IGNORED:
            result.ignored += 1
        else:
            result.errors += 1
        if result.replies is not None:
            replies = result.replies
            if index == len(replies):
                replies.append(reply)
            else:  # a local refusal overtook replies still in flight: keep input order
                replies.extend([_PLACEHOLDER] * (index + 1 - len(replies)))
                replies[index] = reply
        if self.on_reply is not None:
            self.on_reply(index, reply)


_PLACEHOLDER = Reply(ReplyKind.ERROR, "no reply yet")
_PUSHED = PUSHED_PREFIX.encode()
_PUSHED_LENGTH = len(_PUSHED)
