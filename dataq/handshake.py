"""The handshake: what two dataq processes say of themselves when one connects to the other's push daemon.

A client (a feeder, a cascade's hand-on, a custody keeper asking for receipts) opens every connection with one
line, before any record::

    {"hello":"dataq","version":"0.2.0","speaks":["activity","again","algorithm","arrived","audit","identity","pass_on","receipts","site"]}

and reads one line back before it sends anything else. A push daemon that knows the handshake answers with the
same kind of line, naming what *it* speaks; both sides then use the intersection (:attr:`Greeting.capabilities`).
Any other answer (an ``Error:`` line: a dataq older than the handshake, or the 2014 data-q, reads the hello as a
record and refuses it, storing nothing) means the peer speaks only the forms every version knows:
:data:`LEGACY`. What a peer refused, and in which words, is never looked at: only whether it answered the
handshake and what it named.

This is how HTTP/2's SETTINGS frame and Redis's ``HELLO`` evolve a protocol: ask once per connection, keep the
answer in one object (:class:`PeerBook`, one :class:`Peer` per next site), re-learn it on each new connection,
so that a peer upgraded meanwhile is used fully at once. Capabilities a newer peer names and this version does
not know are ignored; a peer that names fewer is sent only what it named.
"""

from __future__ import annotations

import asyncio
import enum
import json
from dataclasses import dataclass, field
from typing import Final

from dataq import __version__
from dataq.errors import InvalidRecord, ProtocolError
from dataq.logs import get_logger
from dataq.protocol import TOO_MANY_CONNECTIONS, parse_reply

HELLO_KEY: Final = "hello"
PRODUCT: Final = "dataq"
HELLO_MARK: Final = b'{"hello"'
"""How every hello line starts (both ends write it so): the push daemon tells it from a record by this alone."""
MAX_HELLO_BYTES: Final = 4096
"""Longest answer to a hello read: a legacy daemon's refusal is capped far below this."""

log = get_logger()


class Capability(enum.StrEnum):
    """One thing a dataq process may speak beyond the 2014 data-q's record lines."""

    SITE = "site"
    """A record line's ``"site"`` key: the name of the site that hands the record on."""
    ALGORITHM = "algorithm"
    """A record line's ``"algorithm"`` key: the checksum algorithm of its id (md5 is assumed without it)."""
    IDENTITY = "identity"
    """A record line's ``"identity"`` key: the file its feeder hashed, so actions need not read it again."""
    RECEIPTS = "receipts"
    """Receipts queries (:mod:`dataq.custody.receipts`): where a record handed on is now, to the end of the chain."""
    AUDIT = "audit"
    """Audit questions (:mod:`dataq.audit.questions`): what a site holds of a record, its stored copy included."""
    AGAIN = "again"
    """A record line's ``"again"`` key: a record sent again on purpose, stored even if remembered done."""
    PASS_ON = "pass_on"
    """Audit questions with ``"forward"``: the site passes them on along its chain and adds the answers after it."""
    ACTIVITY = "activity"
    """A record line's ``"activity"`` key: the activity the record is served in (:mod:`dataq.activities`)."""
    ARRIVED = "arrived"
    """Arrived questions (:mod:`dataq.audit.arrived`): whether the end of a chain holds a copy of each record, one mark
    per id."""


OURS: Final = frozenset(Capability)
"""Everything this version speaks."""


@dataclass(frozen=True, slots=True)
class Greeting:
    """What a peer said of itself: what both sides speak, and the peer's version (None: it did not answer the
    handshake, and speaks only the forms every dataq and the 2014 data-q take)."""

    capabilities: frozenset[Capability]
    version: str | None

    @property
    def legacy(self) -> bool:
        """The peer did not answer the handshake."""
        return self.version is None

    def speaks(self, capability: Capability) -> bool:
        return capability in self.capabilities

    @property
    def full(self) -> bool:
        """Both sides speak all this version does: lines go as they are, with nothing to take out."""
        return self.capabilities == OURS

    def describe(self) -> str:
        """One phrase for operators."""
        if self.legacy:
            return "no handshake (a dataq older than 0.2, or the 2014 data-q): the 2014 record lines only"
        named = ", ".join(sorted(self.capabilities)) or "nothing beyond the 2014 record lines"
        return f"dataq {self.version}, speaking {named}"


LEGACY: Final = Greeting(frozenset(), None)
"""A peer that did not answer the handshake."""


def hello_line(capabilities: frozenset[Capability] = OURS) -> bytes:
    """The hello either side sends (a client to open, a push daemon to answer), with its newline."""
    # No spaces: the 2014 data-q splits a line on whitespace, and one word is refused as one field, never stored.
    value = {HELLO_KEY: PRODUCT, "version": __version__, "speaks": sorted(capabilities)}
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def is_hello(line: bytes) -> bool:
    """Whether a wire line is a hello (checked before it is read as a record)."""
    return line.startswith(HELLO_MARK)


@dataclass(frozen=True, slots=True)
class Hello:
    """A hello as the push daemon read it: what the client speaks (of what this version knows)."""

    capabilities: frozenset[Capability]
    version: str
    unknown: tuple[str, ...] = field(default=())
    """Capabilities the client named that this version does not know (a newer client): not used."""

    def answer(self) -> bytes:
        """The push daemon's answer: what it speaks."""
        return hello_line(OURS)


def parse_hello(line: bytes | str) -> Hello:
    """Read a hello line; InvalidRecord (its message starts with ``hello:``) if it is malformed."""
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"hello: not a JSON object: {exc}") from None
    if not isinstance(value, dict) or value.get(HELLO_KEY) != PRODUCT:
        raise InvalidRecord(f"hello: the line must be a JSON object with {HELLO_KEY!r}: {PRODUCT!r}")
    speaks, version = value.get("speaks"), value.get("version")
    if not isinstance(speaks, list) or not all(isinstance(item, str) for item in speaks):
        raise InvalidRecord("hello: 'speaks' must be a list of names")
    if not isinstance(version, str) or not version or len(version) > 64:
        raise InvalidRecord("hello: 'version' must be a version string (at most 64 characters)")
    known = {item.value for item in Capability}
    return Hello(frozenset(Capability(item) for item in speaks if item in known), version,
                 tuple(sorted(item[:64] for item in speaks if item not in known)))


def read_answer(line: bytes) -> Greeting:
    """What a push daemon's answer to the hello says: its hello (the intersection with ours), or, for any other
    line, :data:`LEGACY`. The words of any other line are not read."""
    if not is_hello(line):
        return LEGACY
    try:
        hello = parse_hello(line)
    except InvalidRecord as exc:
        raise ProtocolError(f"the push daemon answered the handshake with a malformed hello: {exc}") from None
    return Greeting(hello.capabilities & OURS, hello.version)


async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, within: float | None) -> Greeting:
    """Say hello on a new connection and read what the peer answers. ConnectionResetError if the connection
    ends first, ConnectionRefusedError if the daemon refuses it (too many connections); TimeoutError if the peer
    stays silent for ``within`` seconds (None: as long as it takes); ProtocolError for a malformed hello or an
    answer longer than :data:`MAX_HELLO_BYTES`."""
    writer.write(hello_line())
    async with asyncio.timeout(within):
        await writer.drain()
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            raise ConnectionResetError("the connection closed before the handshake was answered") from None
        except asyncio.LimitOverrunError:
            raise ProtocolError("an answer to the handshake longer than the connection's read limit") from None
    if len(line) > MAX_HELLO_BYTES:
        raise ProtocolError(f"an answer to the handshake longer than {MAX_HELLO_BYTES} bytes")
    if not is_hello(line) and _refuses_connection(line):
        # The protocol's one reply that answers no line: the daemon is full, not older (a fixed token).
        raise ConnectionRefusedError(TOO_MANY_CONNECTIONS)
    return read_answer(line)


def _refuses_connection(line: bytes) -> bool:
    try:
        return parse_reply(line).refuses_connection
    except ProtocolError:  # not a reply of the push protocol at all: a peer that did not answer the handshake
        return False


class Peer:
    """What one peer (a next site's push daemon, as ``host:port``) speaks, as learned on the last connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.greeting: Greeting | None = None
        """None until the first connection."""

    def learned(self, greeting: Greeting) -> None:
        """Keep what a new connection's handshake said; a change is logged (a site upgraded or replaced)."""
        before, self.greeting = self.greeting, greeting
        if before == greeting:
            return
        if greeting.legacy:
            log.warning("the next site does not answer the handshake: records go in the 2014 form and it is "
                        "not asked for receipts", site=self.name, speaks=greeting.describe())
        elif before is not None:
            log.info("the next site answers the handshake now; its forms are used in full", site=self.name,
                     speaks=greeting.describe())
        else:
            log.debug("next site greeted", site=self.name, speaks=greeting.describe())

    def speaks(self, capability: Capability) -> bool | None:
        """Whether the peer speaks ``capability``; None while nothing is known of it."""
        return None if self.greeting is None else self.greeting.speaks(capability)


class PeerBook:
    """One :class:`Peer` per ``host:port``, shared by everything that talks to the same next sites."""

    def __init__(self) -> None:
        self._peers: dict[str, Peer] = {}

    def __getitem__(self, name: str) -> Peer:
        peer = self._peers.get(name)
        if peer is None:
            peer = self._peers[name] = Peer(name)
        return peer

    def known(self) -> dict[str, Greeting]:
        """Every peer greeted so far, and what it said."""
        return {name: peer.greeting for name, peer in self._peers.items() if peer.greeting is not None}
