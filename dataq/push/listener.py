"""The push daemon's sockets: one :class:`FeederConnection` per feeder, and the :class:`Listener` that gates them.

Connections are asyncio protocols rather than streams: at 100,000 records a second a coroutine step per line
would cost more than the parsing, and a protocol can stop its socket exactly (``pause_reading``) whenever it
must not take more input. A connection reads while the listener's gate is open (``read`` flag on, Redis
reachable, committer not swamped, not shutting down), its own records in flight are under its window, and its
peer keeps reading the replies. Whatever the reason for a pause, the peer just feels TCP back-pressure:
nothing is dropped or refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable
from typing import cast

from dataq.addresses import peer_text
from dataq.audit.arrived import ARRIVED_KEY, is_arrived_question
from dataq.audit.questions import AUDIT_KEY, is_question
from dataq.audit.relay import Relay
from dataq.custody.receipts import ReceiptQuery, is_query, parse_query
from dataq.errors import InvalidRecord
from dataq.handshake import Capability, is_hello, parse_hello
from dataq.logs import get_logger
from dataq.protocol import TOO_MANY_CONNECTIONS, LineFramer, OverLong, error_reply
from dataq.push.committer import Committer, Entry
from dataq.push.gate import BLOCK_STOPPING, Gate
from dataq.push.relayed import ONLY_QUESTIONS, RelayedQuestions
from dataq.record import RecordRules, parse_line

CONNECTION_WINDOW = 10_000
"""Lines of one connection read but not yet answered, above which that connection stops reading."""

log = get_logger()


class Listener:
    """The set of feeder connections, which read while ``gate`` is open, and their limits."""

    def __init__(
        self,
        committer: Committer,
        gate: Gate,
        *,
        rules: RecordRules,
        max_line_bytes: int,
        max_connections: int,
        batch_max: int,
        idle_timeout: float,
        tls: bool = False,
        window: int = CONNECTION_WINDOW,
        relay: Relay,
    ) -> None:
        self.committer = committer
        self.gate = gate
        self.rules = rules
        self.max_line_bytes = max_line_bytes
        self.max_connections = max_connections
        self.batch_max = batch_max
        self.idle_timeout = idle_timeout
        self.tls = tls
        self.window = window
        self.relay = relay
        """Answers the audit questions to pass on along the chain, and arrived questions."""
        self.connections: set[FeederConnection] = set()
        self.relaying: set[RelayedQuestions] = set()
        """The connections' questions being passed on (ended at shutdown with the connections)."""
        self.accepted = 0
        self.refused = 0
        self._all_closed = asyncio.Event()
        self._all_closed.set()
        gate.watch(self._gate_changed)

    @property
    def stopping(self) -> bool:
        return self.gate.blocks(BLOCK_STOPPING)

    def _gate_changed(self) -> None:
        for connection in list(self.connections):
            connection.update_reading()

    # --- connections -------------------------------------------------------------------------------------

    def protocol_factory(self) -> FeederConnection:
        return FeederConnection(self)

    def admit(self, connection: FeederConnection) -> bool:
        if self.stopping or len(self.connections) >= self.max_connections:
            self.refused += 1
            return False
        self.connections.add(connection)
        self.accepted += 1
        self._all_closed.clear()
        return True

    def forget(self, connection: FeederConnection) -> None:
        self.connections.discard(connection)
        if not self.connections:
            self._all_closed.set()

    def reap_idle(self, now: float) -> int:
        """Close connections idle (or whose peer stopped reading) for longer than the idle timeout."""
        reaped = 0
        for connection in list(self.connections):
            if connection.idle_for(now) > self.idle_timeout:
                connection.reap()
                reaped += 1
        return reaped

    def begin_shutdown(self) -> None:
        """Stop reading everywhere; each connection closes once what it read is answered."""
        self.gate.block(BLOCK_STOPPING)
        for connection in list(self.connections):
            connection.finish()

    async def close_all(self, grace: float) -> None:
        """Close every connection (flushing its replies); abort those not closed within ``grace`` seconds."""
        for connection in list(self.connections):
            connection.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._all_closed.wait()
        for connection in list(self.connections):
            connection.abort()
        relaying = list(self.relaying)
        for relayed in relaying:
            relayed.close()
        await asyncio.gather(*(relayed.closed() for relayed in relaying))


class FeederConnection(asyncio.Protocol):
    """One feeder: frames and parses its lines, submits them to the committer, writes the replies back."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.framer = LineFramer(listener.max_line_bytes)
        self.log = log
        self.in_flight = 0
        self.reading = True
        self.write_paused = False
        self.eof = False
        self.closed = False
        self.admitted = False
        self.speaks: frozenset[Capability] = frozenset()
        """What the peer said it speaks in its hello (nothing: a feeder of the 2014 form, or older than the
        handshake)."""
        self.committing = 0
        """Lines submitted to the committer, not answered yet."""
        self._committed = asyncio.Event()
        self._committed.set()
        self.relayed: RelayedQuestions | None = None
        """This connection's questions to pass on, once it asked one (it then carries nothing else)."""
        self._loop = asyncio.get_running_loop()
        self.last_active = self._loop.time()

    # --- asyncio.Protocol --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = peer_text(transport.get_extra_info("peername"))
        self.log = log.bind(peer=self.peer)
        if not self.listener.admit(self):
            self.log.warning("refusing a feeder: too many connections", limit=self.listener.max_connections)
            self.transport.write(error_reply(TOO_MANY_CONNECTIONS).encode())
            self.transport.close()
            return
        self.admitted = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                # The kernel then notices a vanished peer even if it never sends again (half-open connection).
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        # Debug: the 2014 feeders open a connection per record, so these would be per-record lines at info.
        self.log.debug("feeder connected", connections=len(self.listener.connections))
        self.update_reading()

    def data_received(self, data: bytes) -> None:
        if self.eof or self.listener.stopping or not self.admitted:
            return  # not answered, so the feeder sends it again to the next daemon
        self.last_active = self._loop.time()
        lines = self.framer.feed(data)
        if lines:
            self._submit(lines)

    def eof_received(self) -> bool:
        self.eof = True
        if self.admitted and not self.listener.stopping:
            # A last line without its newline still gets its reply (the peer may have shut down only writing).
            tail = self.framer.finish()
            if tail is not None:
                self._submit([tail])
        self._close_if_done()
        # Keep the write half open for the replies still due; TLS cannot half-close, so it says no.
        return not self.listener.tls and not self.closed

    def pause_writing(self) -> None:
        self.write_paused = True
        self.update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.last_active = self._loop.time()
        self.update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.relayed is not None:
            self.relayed.close()
        if self.admitted:
            self.listener.forget(self)
            self.log.debug("feeder disconnected", in_flight=self.in_flight, error=str(exc) if exc else None)

    # --- the daemon's side -------------------------------------------------------------------------------

    def deliver(self, payload: bytes, count: int) -> None:
        """Replies from the committer, in line order."""
        self.committing -= count
        if not self.committing:
            self._committed.set()
        self._write(payload, count)

    def _write(self, payload: bytes, count: int) -> None:
        """The replies of ``count`` lines, in line order."""
        self.in_flight -= count
        if self.closed or self.transport is None:
            return
        self.transport.write(payload)
        if not self.in_flight:
            self.last_active = self._loop.time()
            self._close_if_done()
        if not self.closed:
            self.update_reading()

    def update_reading(self) -> None:
        """Read exactly when the gate is open, this connection's window has room and its peer reads replies."""
        transport = self.transport
        if transport is None or self.closed:
            return
        listener = self.listener
        want = (
            listener.gate.open and not self.eof and not self.write_paused and self.in_flight < listener.window
        )
        if want != self.reading:
            self.reading = want
            if want:
                self.last_active = self._loop.time()
                transport.resume_reading()
            else:
                transport.pause_reading()

    def idle_for(self, now: float) -> float:
        """Seconds this connection has waited on its peer alone: nothing to answer while reading, or replies
        the peer does not read. Waiting on the daemon (gate closed, Redis slow) never counts."""
        waiting_on_peer = self.write_paused or (self.reading and not self.in_flight)
        return now - self.last_active if waiting_on_peer else 0.0

    def reap(self) -> None:
        self.log.info("closing an idle feeder connection", idle_timeout=self.listener.idle_timeout,
                      unread_replies=self.write_paused)
        if self.write_paused:
            self.abort()  # a peer that does not read would hold a graceful close open forever
        else:
            self.close()

    def finish(self) -> None:
        """Shutdown: stop reading; an unfinished last line is dropped unanswered; close once answered."""
        if self.framer.drop_partial():
            self.log.info("dropping an unfinished line on shutdown; the feeder will send it again")
        self.update_reading()
        self._close_if_done()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.closed = True
            self.transport.abort()

    # --- internals ---------------------------------------------------------------------------------------

    def _close_if_done(self) -> None:
        if not self.in_flight and (self.eof or self.listener.stopping):
            self.close()

    def _commit(self, entries: list[Entry], records: int) -> None:
        self.in_flight += len(entries)
        self.committing += len(entries)
        self._committed.clear()
        self.listener.committer.submit(self, entries, records)

    async def _lines_before_answered(self) -> None:
        await self._committed.wait()

    def _relay(self, item: ReceiptQuery | str) -> None:
        """A line of an audit connection: a question to pass on, or why the line in its place is refused."""
        if self.relayed is None:
            self.relayed = RelayedQuestions(self.listener.relay, self._write, self._lines_before_answered, self.abort)
            self.listener.relaying.add(self.relayed)
            self.relayed.when_done(self.listener.relaying.discard)
            self.log.debug("an audit connection: passing its questions on")
        self.in_flight += 1
        self.relayed.add(item)

    def _submit(self, lines: Iterable[bytes | OverLong]) -> None:
        listener = self.listener
        rules, batch_max = listener.rules, listener.batch_max
        entries: list[Entry] = []
        records = 0
        for line in lines:
            if isinstance(line, bytes):
                try:
                    if self.relayed is not None:
                        self._relay(parse_query(line, rules, AUDIT_KEY) if is_question(line) else
                                    parse_query(line, rules, ARRIVED_KEY) if is_arrived_question(line) else
                                    ONLY_QUESTIONS)
                        continue
                    if line.startswith(b"{"):
                        # Hellos, audit questions and receipts queries are JSON objects: a record line of the 2014
                        # form skips their three checks, which had cost it more than its own reading.
                        if is_hello(line):
                            hello = parse_hello(line)
                            self.speaks = hello.capabilities
                            self.log.debug("feeder greeted", version=hello.version, speaks=sorted(hello.capabilities),
                                           unknown=hello.unknown or None)
                            if not entries and not self.in_flight and self.transport is not None:
                                # Nothing of this connection waits for an answer before it (a hello opens a
                                # connection): answered at once, not behind other connections' writes to Redis.
                                self.transport.write(hello.answer())
                                continue
                            entries.append(hello)
                            continue
                        held = is_arrived_question(line)
                        if held or is_question(line):
                            query = parse_query(line, rules, ARRIVED_KEY if held else AUDIT_KEY)
                            if held or query.forward:
                                if entries:
                                    self._commit(entries, records)
                                    entries, records = [], 0
                                self._relay(query)
                            else:
                                entries.append(query)
                            continue
                        if is_query(line):
                            entries.append(parse_query(line, rules))
                            continue
                    entries.append(parse_line(line, rules))
                    records += 1
                    if records >= batch_max:
                        self._commit(entries, records)
                        entries, records = [], 0
                    continue
                except InvalidRecord as exc:
                    message = str(exc)
            else:
                message = f"line longer than {listener.max_line_bytes} bytes"
            if self.relayed is not None:
                self._relay(message)
            else:
                entries.append(message)
            self.log.warning("refused a record line", error=message)
        if entries:
            self._commit(entries, records)
        self.update_reading()
