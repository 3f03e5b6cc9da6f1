"""The feeder's side of a link to a push daemon: the lines it sends, the result it gets back, TLS, its errors."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dataq.errors import DataqError
from dataq.logs import get_logger
from dataq.protocol import Reply, ReplyKind
from dataq.record import Record, format_line

FeedItem = Record | str | bytes
"""What a feeder sends: a Record, or a record line in either wire form (without its newline)."""
FeedChunk = list[FeedItem]
"""Items an async source had at once (a spool's batch): they go out together, in one write."""
LinkCallback = Callable[[bool, str], None]
"""Called with True and ``host:port`` on every connection made, with False and the error on every failure."""

log = get_logger()


class FeedError(DataqError):
    """The feeder could not reach the push daemon (for longer than it was willing to retry) or talk TLS with it."""



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

    def record(self, index: int, reply: Reply) -> None:
        """Count the reply to the item at ``index`` (0-based, input order) and keep it in its place."""
        if reply.kind is ReplyKind.PUSHED:
            self.pushed += 1
        elif reply.kind is ReplyKind.IGNORED:
            self.ignored += 1
        else:
            self.errors += 1
        if self.replies is not None:
            replies = self.replies
            if index == len(replies):
                replies.append(reply)
            else:  # a local refusal overtook replies still in flight: keep input order
                replies.extend([_PLACEHOLDER] * (index + 1 - len(replies)))
                replies[index] = reply

    def summary(self) -> str:
        return (f"pushed {self.pushed}, ignored {self.ignored}, errors {self.errors} in {self.elapsed:.2f} s "
                f"({self.rate:,.0f} records/s)" + (f", {self.reconnects} reconnects" if self.reconnects else ""))


_PLACEHOLDER = Reply(ReplyKind.ERROR, "no reply yet")


def client_tls_context(ca: str | None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """A context that verifies the daemon against ``ca`` (system CAs if None) and shows ``cert`` if given."""
    context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise DataqError(f"cannot load the client certificate {cert}: {exc}") from exc
    return context


def raise_if_tls_refused(exc: BaseException | None, host: str, port: int) -> None:
    """A TLS failure other than a dropped connection (a certificate refused by either side) will not go away
    by retrying: end the feed with it."""
    if isinstance(exc, ssl.SSLError) and not isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        raise FeedError(f"TLS with the push daemon at {host}:{port} failed: {exc.reason or exc}") from exc


def encode_item(item: FeedItem) -> tuple[bytes, str | None] | Reply:
    """The line to send (with its newline) and the id a reply must name; a Reply if it cannot be sent."""
    try:
        # A path from os.walk may hold undecodable bytes (as surrogate escapes): they go out as they are, and
        # the daemon refuses that one record instead of the feeder failing.
        if isinstance(item, Record):
            text = format_line(item, with_identity=True)
            return (text + "\n").encode("utf-8", "surrogateescape"), item.checksum
        line = item.encode("utf-8", "surrogateescape") if isinstance(item, str) else item
    except UnicodeEncodeError as exc:
        return Reply(ReplyKind.ERROR, f"line cannot be encoded: {exc.reason}")
    if line.endswith(b"\n"):
        line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
    if b"\n" in line:
        return Reply(ReplyKind.ERROR, "line contains a newline (one record per line)")
    return line + b"\n", None


class LinkState:
    """Whether the push daemons can be reached: an outage is logged when it starts and when it ends, its retries
    only at debug level; ``on_link`` hears of every connection and failure."""

    def __init__(self, targets: int, on_link: LinkCallback | None = None) -> None:
        self.targets, self.on_link = targets, on_link
        self.down_since: float | None = None

    def failed(self, host: str, port: int, error: str, **details: object) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            more = {"next": "the next push daemon"} if self.targets > 1 else {}
            log.warning("push daemon unreachable; records wait, retrying", target=f"{host}:{port}", error=error,
                        **more, **details)
        else:
            log.debug("push daemon still unreachable", target=f"{host}:{port}", error=error, **details)
        if self.on_link is not None:
            self.on_link(False, f"{host}:{port}: {error}")

    def up(self, host: str, port: int) -> None:
        if self.down_since is not None:
            log.info("push daemon reachable again", target=f"{host}:{port}",
                     outage_seconds=round(time.monotonic() - self.down_since, 1))
            self.down_since = None
        if self.on_link is not None:
            self.on_link(True, f"{host}:{port}")

    def check_tls(self, exc: BaseException | None, host: str, port: int) -> None:
        """A certificate refused (by either side) does not go away by retrying: with one push daemon, the feed
        ends with it; with several, the next is tried (the refusal logged as the error it is, at every round)."""
        try:
            raise_if_tls_refused(exc, host, port)
        except FeedError as refused:
            if self.targets == 1:
                raise
            log.error("TLS refused; trying the next push daemon", target=f"{host}:{port}", error=str(refused))
