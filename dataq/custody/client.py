"""Asking a next site's push daemon for receipts (:mod:`dataq.custody.receipts`), over the connection type (and TLS or
mutual TLS) the hand-on uses, once its handshake has said it speaks them."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence

from dataq.custody.receipts import Receipt, ReceiptKind, parse_answer, query_line
from dataq.errors import DataqError, ProtocolError
from dataq.feed.link import FeedError, raise_if_tls_refused
from dataq.handshake import Capability, Greeting, Peer, greet

IDS_PER_LINE = 100
"""Ids per receipts line: a line of 100 md5 ids is about 3.5 KB, far below any push daemon's line limit."""


class ReceiptsNotSpoken(DataqError):
    """The next site's push daemon did not name receipts in its handshake (a dataq older than 0.2, or the 2014
    data-q): it cannot be asked where a record is."""

    def __init__(self, greeting: Greeting) -> None:
        super().__init__(f"it does not speak receipts ({greeting.describe()})")
        self.greeting = greeting


async def ask(host: str, port: int, ids: Sequence[str], *, site: str, tls: ssl.SSLContext | None,
              within: float, peer: Peer | None = None) -> list[Receipt]:
    """The next site's answer about each of ``ids``, in order; ``peer`` learns what the handshake said.

    FeedError if it cannot be reached or does not answer within ``within`` seconds (an outage: ask again
    later), ReceiptsNotSpoken if its handshake does not name receipts, ProtocolError if it answers nonsense.
    """
    try:
        async with asyncio.timeout(within):
            reader, writer = await asyncio.open_connection(host, port, ssl=tls)
            try:
                greeting = await greet(reader, writer, None)  # ``within`` bounds it all
                if peer is not None:
                    peer.learned(greeting)
                if not greeting.speaks(Capability.RECEIPTS):
                    raise ReceiptsNotSpoken(greeting)
                return await _exchange(reader, writer, ids, site)
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()
    except TimeoutError:
        raise FeedError(f"{host}:{port} did not answer receipts within {within:g} s") from None
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
        raise_if_tls_refused(exc, host, port)
        raise FeedError(f"cannot ask {host}:{port} for receipts: {exc}") from exc


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ids: Sequence[str],
                    site: str) -> list[Receipt]:
    chunks = [list(ids[start:start + IDS_PER_LINE]) for start in range(0, len(ids), IDS_PER_LINE)]
    writer.write(b"".join(query_line(chunk, site) for chunk in chunks))
    await writer.drain()
    answers: list[Receipt] = []
    for chunk in chunks:
        for position in range(len(chunk)):
            line = await reader.readline()
            if not line.endswith(b"\n"):
                raise ConnectionResetError("the connection closed before every id was answered")
            answer = parse_answer(line)
            if answer.kind is not ReceiptKind.REFUSED and answer.record_id != chunk[position]:
                raise ProtocolError(f"the answer about {answer.record_id} came in the place of {chunk[position]}")
            if not answer.record_id:  # a refusal names no id: it is this position's
                answer = Receipt(ReceiptKind.REFUSED, chunk[position], error=answer.error)
            answers.append(answer)
    return answers
