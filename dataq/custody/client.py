"""Asking a next site's push daemon about records: receipts (:mod:`dataq.custody.receipts`) and, over the same
kind of connection, audit questions (:mod:`dataq.audit.questions`), over the connection type (and TLS or mutual
TLS) the hand-on uses, once its handshake has said it speaks them."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence

from dataq.custody.receipts import RECEIPTS_KEY, Receipt, ReceiptKind, parse_answer, query_line
from dataq.errors import DataqError, ProtocolError
from dataq.feed.link import FeedError, raise_if_tls_refused
from dataq.handshake import Capability, Greeting, Peer, greet
from dataq.nextsite import NextSites

IDS_PER_LINE = 100
"""Ids per question line: a line of 100 md5 ids is about 3.5 KB, far below any push daemon's line limit."""


READ_BYTES = 1 << 16
"""Bytes of answers read at once."""
MAX_ANSWER_BYTES = 1 << 20
"""The longest answer line taken: one id's answers along a chain of 16 sites are a few KB."""


class NotSpoken(DataqError):
    """The next site's push daemon did not name what it is asked in its handshake (a dataq older than it, or the
    2014 data-q): it cannot be asked."""

    def __init__(self, greeting: Greeting, capability: Capability = Capability.RECEIPTS) -> None:
        super().__init__(f"it does not speak {capability.value} ({greeting.describe()})")
        self.greeting = greeting
        self.capability = capability


ReceiptsNotSpoken = NotSpoken
"""The name the custody keeper knows it by: a next site that cannot be asked for receipts."""


async def ask(host: str, port: int, ids: Sequence[str], *, site: str, tls: ssl.SSLContext | None,
              within: float, peer: Peer | None = None) -> list[Receipt]:
    """The next site's answer about each of ``ids``, in order; ``peer`` learns what the handshake said.

    FeedError if it cannot be reached or does not answer within ``within`` seconds (an outage: ask again
    later), NotSpoken if its handshake does not name receipts, ProtocolError if it answers nonsense.
    """
    lines = await ask_lines(host, port, ids, site=site, tls=tls, within=within, peer=peer,
                            capability=Capability.RECEIPTS, key=RECEIPTS_KEY)
    return _receipts(ids, lines)


async def ask_over(next_sites: NextSites, target: str, ids: Sequence[str], *, site: str,
                   within: float) -> list[Receipt]:
    """As :func:`ask`, over the kept link to the next site ``target`` (as ``next_sites`` writes it), the one
    its hand-ons travel on."""

    def compose(greeting: Greeting) -> bytes:
        if not greeting.speaks(Capability.RECEIPTS):
            raise NotSpoken(greeting)
        return b"".join(query_line(list(ids[start:start + IDS_PER_LINE]), site, RECEIPTS_KEY)
                        for start in range(0, len(ids), IDS_PER_LINE))

    read: list[list[Receipt]] = []

    def check(lines: list[bytes]) -> None:
        # Read as they arrive: answers about other ids (out of step with the questions) drop the connection.
        read.append(_receipts(ids, lines))

    await next_sites.ask(target, compose, len(ids), within, check)
    return read[0]


def _receipts(ids: Sequence[str], lines: list[bytes]) -> list[Receipt]:
    """The receipts of the answer ``lines`` about ``ids`` (one each, in order)."""
    answers: list[Receipt] = []
    for record_id, line in zip(ids, lines, strict=True):
        answer = parse_answer(line)
        if answer.kind is not ReceiptKind.REFUSED and answer.record_id != record_id:
            raise ProtocolError(f"the answer about {answer.record_id} came in the place of {record_id}")
        if not answer.record_id:  # a refusal names no id: it is this position's
            answer = Receipt(ReceiptKind.REFUSED, record_id, error=answer.error)
        answers.append(answer)
    return answers


async def ask_lines(host: str, port: int, ids: Sequence[str], *, site: str, tls: ssl.SSLContext | None,
                    within: float, peer: Peer | None, capability: Capability, key: str, forward: int = 0,
                    passed_within: float | None = None) -> list[bytes]:
    """The answer lines of a push daemon that speaks ``capability`` to the question lines under ``key`` about
    ``ids``, one per id, in order (see :func:`ask` for the errors); audit questions are passed on ``forward``
    sites further, each given ``passed_within`` seconds."""

    def questions(greeting: Greeting) -> tuple[list[bytes], int]:
        further, further_within = forward, passed_within
        if not greeting.speaks(Capability.PASS_ON):
            # A peer that answers audit questions but does not pass them on would refuse the keys: it is asked
            # for its own answers, and its asker goes on past it itself.
            further, further_within = 0, None
        return [query_line(list(ids[start:start + IDS_PER_LINE]), site, key, forward=further, within=further_within)
                for start in range(0, len(ids), IDS_PER_LINE)], len(ids)

    return await exchange(host, port, tls=tls, within=within, peer=peer, capability=capability, what=f"{key} questions",
                          questions=questions)


async def exchange(host: str, port: int, *, tls: ssl.SSLContext | None, within: float, peer: Peer | None,
                   capability: Capability, what: str,
                   questions: Callable[[Greeting], tuple[list[bytes], int]]) -> list[bytes]:
    """The answer lines of a push daemon that speaks ``capability`` to the question lines ``questions`` composes
    for it once it has greeted (with how many answer lines they take), on a connection of their own: FeedError if
    it cannot be reached or does not answer within ``within`` seconds, NotSpoken if its handshake does not name
    ``capability``, ProtocolError if it answers more lines than asked."""
    try:
        async with asyncio.timeout(within):
            reader, writer = await asyncio.open_connection(host, port, ssl=tls)
            try:
                greeting = await greet(reader, writer, None)  # ``within`` bounds it all
                if peer is not None:
                    peer.learned(greeting)
                if not greeting.speaks(capability):
                    raise NotSpoken(greeting, capability)
                lines, expected = questions(greeting)
                return await _exchange(reader, writer, lines, expected)
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()
    except TimeoutError:
        raise FeedError(f"{host}:{port} did not answer {what} within {within:g} s") from None
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
        raise_if_tls_refused(exc, host, port)
        raise FeedError(f"cannot ask {host}:{port} {what}: {exc}") from exc


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, questions: list[bytes],
                    expected: int) -> list[bytes]:
    async def send() -> None:
        for line in questions:
            writer.write(line)
            await writer.drain()

    # Sent while the answers are read: an audit asks about 100,000 ids, and a daemon whose answers nobody reads
    # stops reading questions.
    sending = asyncio.create_task(send())
    try:
        # Read in blocks, not line by line: 100,000 answers would cost as many turns of the event loop.
        lines: list[bytes] = []
        rest = b""
        while len(lines) < expected:
            block = await reader.read(READ_BYTES)
            if not block:
                raise ConnectionResetError("the connection closed before every question was answered")
            *complete, rest = (rest + block).split(b"\n")
            lines += [line + b"\n" for line in complete]
            if len(rest) > MAX_ANSWER_BYTES:
                raise ProtocolError(f"an answer line longer than {MAX_ANSWER_BYTES} bytes")
        if len(lines) > expected or rest:
            raise ProtocolError(f"{len(lines) - expected} more answer lines than asked for")
        await sending
        return lines
    finally:
        if not sending.done():
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
