"""The push protocol: newline-framed record lines in, one reply line out per record, in order.

A feeder sends record lines in either wire form of :mod:`dataq.record`. For every line the daemon answers, in
the order the lines came, with exactly one of

* ``Pushed ID=<checksum>``: the record is stored (Redis confirmed the write);
* ``Ignored ID=<checksum>``: a record with that id is already tracked, or was done within the queue's
  ``remember_done``;
* ``Error: <what is wrong with which field>``: the line was refused; nothing was stored. One error refuses
  the write, not the record: ``Error: not replicated to N replica(s) within T s`` (with ``min_replicas``); the
  feeder sends the record again, and is answered ``Pushed`` if the first write had landed after all.

A receipts line (``{"receipts": [...]}``, :mod:`dataq.custody.receipts`) is answered with one line per id instead.
The first two are the 2014 data-q's wording, so its feeders keep working; every reply ends with ``\\n`` so a
pipelining feeder can frame them. One reply is not tied to a line: :data:`TOO_MANY_CONNECTIONS`, sent right
before the daemon closes a connection it cannot serve. This module formats and parses replies and frames
lines for both ends, so the daemon and the feeder cannot disagree.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from dataq.errors import NOT_REPLICATED_PREFIX, ProtocolError

PUSHED_PREFIX: Final = "Pushed ID="
IGNORED_PREFIX: Final = "Ignored ID="
ERROR_PREFIX: Final = "Error: "
NEWLINE: Final = b"\n"
MAX_ERROR_CHARS: Final = 1000
"""Longest error text sent back: a message may quote a field, and a field may be as long as a line."""
TOO_MANY_CONNECTIONS: Final = "too many connections; try again later"
"""The message of the reply a daemon at its connection limit sends before it closes the connection."""


class ReplyKind(enum.Enum):
    PUSHED = "pushed"
    IGNORED = "ignored"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply: its kind and the record id (pushed, ignored) or the error message."""

    kind: ReplyKind
    detail: str

    @property
    def ok(self) -> bool:
        """True unless the record was refused (an ignored duplicate is fine: the queue has it)."""
        return self.kind is not ReplyKind.ERROR

    @property
    def asks_to_resend(self) -> bool:
        """True for an error that refuses the write for now, not the record: send it again (with
        ``min_replicas``, a write that too few replicas confirmed in time)."""
        return self.kind is ReplyKind.ERROR and self.detail.startswith(NOT_REPLICATED_PREFIX)

    @property
    def refuses_connection(self) -> bool:
        """True for the daemon's "too many connections" reply, which answers no record."""
        return self.kind is ReplyKind.ERROR and self.detail == TOO_MANY_CONNECTIONS

    def __str__(self) -> str:
        return format_reply(self.kind, self.detail).rstrip("\n")


_PREFIXES: Final = {ReplyKind.PUSHED: PUSHED_PREFIX, ReplyKind.IGNORED: IGNORED_PREFIX, ReplyKind.ERROR: ERROR_PREFIX}


def clean_message(message: str) -> str:
    """An error message fit for one reply line: no line breaks, and not longer than :data:`MAX_ERROR_CHARS`."""
    if "\n" in message or "\r" in message:
        message = message.replace("\r", "\\r").replace("\n", "\\n")
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 3] + "..."
    return message


def format_reply(kind: ReplyKind, detail: str) -> str:
    """The reply line, with its newline."""
    if kind is ReplyKind.ERROR:
        detail = clean_message(detail)
    return f"{_PREFIXES[kind]}{detail}\n"


def pushed_reply(checksum: str) -> str:
    return f"{PUSHED_PREFIX}{checksum}\n"


def ignored_reply(checksum: str) -> str:
    return f"{IGNORED_PREFIX}{checksum}\n"


def error_reply(message: str) -> str:
    return f"{ERROR_PREFIX}{clean_message(message)}\n"


def parse_reply(line: bytes | str) -> Reply:
    """Parse one reply line (its newline may still be there); ProtocolError if it is none of the three kinds."""
    text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    if text.startswith(PUSHED_PREFIX):
        return Reply(ReplyKind.PUSHED, text[len(PUSHED_PREFIX) :])
    if text.startswith(IGNORED_PREFIX):
        return Reply(ReplyKind.IGNORED, text[len(IGNORED_PREFIX) :])
    if text.startswith(ERROR_PREFIX):
        return Reply(ReplyKind.ERROR, text[len(ERROR_PREFIX) :])
    raise ProtocolError(f"unexpected reply {text[:200]!r}")


class OverLong:
    """Stands, in the framer's output, for a line that was longer than allowed (its bytes were discarded)."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length
        """Bytes the line had (at least; counting stops once it is known to be too long)."""


class LineFramer:
    """Cuts a byte stream into lines (without their ``\\n``) of at most ``max_bytes`` bytes.

    A longer line is not buffered: its bytes are dropped as they come and, once its newline arrives, it shows
    up in the output as one :class:`OverLong`, in its place among the other lines, so the peer still gets one
    reply per line and memory stays bounded whatever a peer sends.
    """

    __slots__ = ("_discarded", "_partial", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._partial = b""
        self._discarded = -1  # bytes of the over-long line being dropped; -1 when not dropping

    def feed(self, data: bytes) -> list[bytes | OverLong]:
        """The lines that ``data`` completes, in order."""
        out: list[bytes | OverLong] = []
        if self._discarded >= 0:
            end = data.find(NEWLINE)
            if end < 0:
                self._discarded += len(data)
                return out
            out.append(OverLong(self._discarded + end))
            self._discarded = -1
            data = data[end + 1 :]
        if self._partial:
            data = self._partial + data
            self._partial = b""
        lines = data.split(NEWLINE)
        tail = lines.pop()
        limit = self.max_bytes
        for line in lines:
            out.append(line if len(line) <= limit else OverLong(len(line)))
        if len(tail) > limit:
            self._discarded = len(tail)
        else:
            self._partial = tail
        return out

    def finish(self) -> bytes | OverLong | None:
        """At end of stream: the last line if it lacked its newline (None if there is none)."""
        partial, discarded = self._partial, self._discarded
        self._partial, self._discarded = b"", -1
        if discarded >= 0:
            return OverLong(discarded)
        return partial or None

    def drop_partial(self) -> bool:
        """Forget an unfinished line (on shutdown: it was not all read, so it must not be answered)."""
        had = bool(self._partial) or self._discarded >= 0
        self._partial, self._discarded = b"", -1
        return had

    @property
    def pending(self) -> bool:
        """Whether an unfinished line is buffered or being dropped."""
        return bool(self._partial) or self._discarded >= 0
