"""A connection's audit questions passed on along the chain (:mod:`dataq.audit.relay`), answered in line order.

Once a connection asks a question to pass on (or an arrived question, :mod:`dataq.audit.arrived`), it is an audit
connection: its questions are answered here, after every line it sent before (which the committer answers), and any
other line it sends is refused in its place, because its answer would have to wait behind round trips to other
sites.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from dataq.audit.relay import Relay
from dataq.custody.receipts import ReceiptQuery
from dataq.logs import get_logger
from dataq.protocol import error_reply

BATCH_IDS = 10_000
"""Ids of the questions waiting that are passed on at once: one walk of the chain for all of them."""
ONLY_QUESTIONS = ("audit: this connection passes audit questions on, and carries nothing else: send records and "
                  "receipts queries on a connection of their own")

log = get_logger()


class RelayedQuestions:
    """The questions of one connection to pass on: ``deliver(payload, lines)`` writes their answers, once
    ``committed()`` says the lines before them are answered; ``abort()`` drops the connection if answering
    fails of a bug (its asker then hears at once that this site did not answer)."""

    def __init__(self, relay: Relay, deliver: Callable[[bytes, int], None],
                 committed: Callable[[], Awaitable[None]], abort: Callable[[], None]) -> None:
        self.relay = relay
        self.deliver = deliver
        self.committed = committed
        self.abort = abort
        self._waiting: asyncio.Queue[ReceiptQuery | str] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._deadline: float | None = None
        self._task = asyncio.create_task(self._run(), name="push-relayed-questions")

    def add(self, item: ReceiptQuery | str) -> None:
        """A question to answer, or (a string) why a line in its place is refused."""
        if self._deadline is None and isinstance(item, ReceiptQuery) and item.within is not None:
            # The asker waits this long from now for every answer of the connection, not per batch.
            self._deadline = self._loop.time() + item.within
        self._waiting.put_nowait(item)

    def close(self) -> None:
        self._task.cancel()

    def when_done(self, callback: Callable[[RelayedQuestions], None]) -> None:
        """Call ``callback`` with this object once its answering task has ended."""
        self._task.add_done_callback(lambda _: callback(self))

    async def closed(self) -> None:
        """Once the answering task has ended (after :meth:`close`): nothing of it is left pending at shutdown."""
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        await self.committed()
        while True:
            batch = [await self._waiting.get()]
            ids = len(batch[0].ids) if isinstance(batch[0], ReceiptQuery) else 0
            while not self._waiting.empty() and ids < BATCH_IDS:
                item = self._waiting.get_nowait()
                batch.append(item)
                ids += len(item.ids) if isinstance(item, ReceiptQuery) else 0
            try:
                await self._answer(batch)
            except Exception:  # a bug must not take the push daemon down
                log.exception("cannot answer audit questions passed on; closing their connection")
                self.abort()
                return

    async def _answer(self, batch: list[ReceiptQuery | str]) -> None:
        queries = [item for item in batch if isinstance(item, ReceiptQuery)]
        answers = iter(await self.relay.answer(queries, self._deadline) if queries else [])
        for item in batch:
            text = next(answers) if isinstance(item, ReceiptQuery) else error_reply(item)
            self.deliver(text.encode(), 1)

