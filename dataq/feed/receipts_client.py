"""Asking a next site's push daemon for receipts (:mod:`dataq.receipts`), over the connection type (and TLS or
mutual TLS) the hand-on uses."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence

from dataq.errors import DataqError, ProtocolError
from dataq.feed.link import FeedError, raise_if_tls_refused
from dataq.protocol import TOO_MANY_CONNECTIONS
from dataq.receipts import NOT_UNDERSTOOD, REFUSED, Receipt, parse_answer, query_line

IDS_PER_LINE = 100
"""Ids per receipts line: a line of 100 md5 ids is about 3.5 KB, far below any push daemon's line limit."""


class OlderPeer(DataqError):
    """The next site's push daemon does not understand receipts (a dataq older than custody)."""


async def ask(host: str, port: int, ids: Sequence[str], *, site: str, tls: ssl.SSLContext | None,
              within: float) -> list[Receipt]:
    """The next site's answer about each of ``ids``, in order.

    FeedError if it cannot be reached or does not answer within ``within`` seconds (an outage: ask again
    later), OlderPeer if it does not understand the query, ProtocolError if it answers nonsense.
    """
    try:
        async with asyncio.timeout(within):
            reader, writer = await asyncio.open_connection(host, port, ssl=tls)
            try:
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
            if answer.kind == NOT_UNDERSTOOD and answer.error == TOO_MANY_CONNECTIONS:
                raise ConnectionRefusedError(TOO_MANY_CONNECTIONS)  # answers no line: the daemon is full
            if answer.kind == NOT_UNDERSTOOD:
                if position == 0:  # it read the whole line as one record and refused it
                    raise OlderPeer(f"it answered a receipts query with: {answer.error}")
                raise ProtocolError(f"a refusal in the middle of a receipts answer: {answer.error}")
            if answer.kind != REFUSED and answer.record_id != chunk[position]:
                raise ProtocolError(f"the answer about {answer.record_id} came in the place of {chunk[position]}")
            answers.append(answer if answer.record_id else Receipt(REFUSED, chunk[position], error=answer.error))
    return answers
