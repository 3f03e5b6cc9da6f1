"""Store and forward: what a spool holds is sent to the push daemons, for as long as it takes.

:class:`Forwarder` feeds the spool's pending records through a :class:`~dataq.feed.client.Feeder` that never
gives up (capped exponential backoff with jitter, fail-over between targets) and resolves each answer in the
spool: ``Pushed`` or ``Ignored`` takes the record out, ``Error:`` keeps it with its reason (logged, shown by
``--status``, not sent again). Answers are resolved in batches; a kill before a batch is resolved only means
those records are sent again after the restart, which the push daemon's de-duplication answers ``Ignored``.
Whoever puts records in the spool calls :meth:`Forwarder.wake`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

from dataq.errors import SpoolError
from dataq.feed.client import DEFAULT_WINDOW, Feeder, Target
from dataq.feed.link import FeedItem
from dataq.feed.spool import Pending, Spool
from dataq.handshake import PeerBook
from dataq.logs import get_logger
from dataq.protocol import Reply, ReplyKind

RESOLVE_EVERY = 0.05
"""Seconds between two resolutions of answers in the spool (one transaction each)."""
RESOLVE_BATCH = 2000
"""Answers that are resolved at once."""
IDLE_RECHECK = 5.0
"""Seconds between two looks at an idle spool (records made pending again by another process)."""
READ_AHEAD_WINDOWS = 2
"""Windows of rows given to the link at most before their answers: one in flight, one waiting to go."""
OUTAGE_BACKOFF_CAP = 30.0
"""Longest wait between two attempts to reach the push daemons during an outage."""

_COUNTED = {ReplyKind.PUSHED: "pushed", ReplyKind.IGNORED: "ignored", ReplyKind.ERROR: "refused"}

log = get_logger()


class Forwarder:
    """Sends a spool's records to ``targets`` (tried in order) until stopped; see the module's docstring."""

    def __init__(
        self,
        spool: Spool,
        targets: Sequence[Target],
        *,
        window: int = DEFAULT_WINDOW,
        tls: ssl.SSLContext | None = None,
        timeout: float | None = None,
        failback_after: float | None = None,
        peers: PeerBook | None = None,
    ) -> None:
        if not targets:
            raise ValueError("a forwarder needs at least one push daemon")
        self.spool = spool
        (host, port), *others = targets
        extra = {"timeout": timeout} if timeout is not None else {}
        if failback_after is not None:
            extra["failback_after"] = failback_after
        self.feeder = Feeder(host, port, also=others, window=window, tls=tls, retry_for=math.inf,
                             backoff_cap=OUTAGE_BACKOFF_CAP, keep_replies=False, on_reply=self._on_reply,
                             on_link=self._on_link, peers=peers, **extra)
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._draining = False
        self._connected = asyncio.Event()
        self._resolve_now = asyncio.Event()
        self._sent: dict[int, Pending] = {}
        self._nothing_sent = asyncio.Event()
        """Set while every record sent has been answered: a stop then has nothing to wait for."""
        self._nothing_sent.set()
        self._answer = asyncio.Event()
        """Set by every answer: the reader of the spool waits for one while enough rows are out."""
        self._next_index = 0
        self._done: list[int] = []
        self._refused: list[tuple[int, str]] = []
        self._link_notes: dict[str, object] = {}
        self._outage_since: float | None = None
        self.counts: Counter[str] = Counter()
        """Replies since the start: pushed, ignored, refused."""
        self.answered = 0
        """Records taken out of the spool since the start (answered, resolved)."""
        self.connected_to: str | None = None
        """``host:port`` of the push daemon connected to; None while none is reachable (the feeder's metrics)."""
        self.last_answered_at: float | None = None
        """Unix time of the last record a push daemon acknowledged."""

    def replies(self) -> tuple[int, int]:
        """Records acknowledged (pushed or ignored) and refused since the start."""
        return self.counts["pushed"] + self.counts["ignored"], self.counts["refused"]

    def wake(self) -> None:
        """Records were added to the spool."""
        self._wake.set()

    async def run(self) -> None:
        """Send until :meth:`finish` is called and what was sent is answered (or until cancelled)."""
        resolver = asyncio.create_task(self._resolve_loop(), name="spool-resolver")
        try:
            await self.feeder.feed(self._records())
        finally:
            resolver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resolver
            # The last answers too: a clean stop sends nothing twice.
            with contextlib.suppress(SpoolError):
                await self._resolve()

    def drain(self) -> None:
        """Nothing more will be added: :meth:`run` returns once every record in the spool is answered."""
        self._draining = True
        self._wake.set()

    def finish(self) -> None:
        """Take nothing more from the spool; :meth:`run` returns once what is in flight is answered."""
        self._stop.set()
        self._wake.set()

    async def all_answered(self) -> None:
        """Return once no record sent waits for its answer."""
        await self._nothing_sent.wait()

    async def _records(self) -> AsyncIterator[list[FeedItem]]:
        # The rows of one read go out together: one write to the push daemon, not one per row.
        cursor = 0
        while not self._stop.is_set():
            if not self._connected.is_set():
                # Rows are read (and their files looked at) only once they can go out: a file deleted during an
                # outage is then not sent after it.
                await _first(self._connected.wait(), self._stop.wait())
                continue
            if len(self._sent) >= READ_AHEAD_WINDOWS * self.feeder.window:
                # Rows are read (and their files looked at) shortly before they go out, as in an outage.
                self._answer.clear()
                await _first(self._answer.wait(), self._stop.wait())
                continue
            rows = await self.spool.pending(cursor, self.feeder.window)
            if not rows:
                self._wake.clear()
                # Asked again after the clear: a record added in between must not wait for the next wake.
                rows = await self.spool.pending(cursor, self.feeder.window)
                if not rows:
                    if self._draining:
                        return
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(IDLE_RECHECK):
                            await self._wake.wait()
                    continue
            cursor = rows[-1].seq
            rows = await self._without_vanished(rows)
            if self._stop.is_set():
                return
            if rows:
                yield [self._out(row) for row in rows]

    def _out(self, row: Pending) -> bytes:
        """Note a row as sent; its line (in the form the push daemon speaks: the
        :class:`~dataq.feed.client.Feeder` sees to that)."""
        self._sent[self._next_index] = row
        self._nothing_sent.clear()
        self._next_index += 1
        return row.line

    async def _without_vanished(self, rows: list[Pending]) -> list[Pending]:
        """Drop the records of watched files deleted before they were sent (sending them would fail later)."""
        local = [row for row in rows if row.local]
        if not local:
            return rows
        exists = await asyncio.to_thread(lambda: {row.seq: os.path.lexists(row.path) for row in local})
        vanished = [row for row in local if not exists[row.seq]]
        if not vanished:
            return rows
        for row in vanished:
            log.warning("file vanished before it was sent; its record is dropped", path=row.path)
        try:
            await self.spool.drop([row.seq for row in vanished])
        except SpoolError as exc:  # a full disk: not sent either way, and dropped at the next start
            log.warning("cannot drop the records of vanished files from the spool yet", error=str(exc))
        return [row for row in rows if exists.get(row.seq, True)]

    def _on_reply(self, index: int, reply: Reply) -> None:
        row = self._sent.pop(index)
        self._answer.set()
        if not self._sent:
            self._nothing_sent.set()
        self.counts[_COUNTED[reply.kind]] += 1
        if reply.kind is ReplyKind.ERROR:
            log.error("the push daemon refused a record; it stays in the spool, refused", path=row.path,
                      reason=reply.detail)
            self._refused.append((row.seq, reply.detail))
        else:
            self._done.append(row.seq)
            self.last_answered_at = time.time()
        if len(self._done) >= RESOLVE_BATCH:
            self._resolve_now.set()

    def _on_link(self, up: bool, detail: str) -> None:
        now = time.time()
        if up:
            self._connected.set()
            self.connected_to = detail
            self._outage_since = None
            self._link_notes.update(connected=detail, connected_at=now, outage_since=None)
        else:
            self._connected.clear()
            self.connected_to = None
            if self._outage_since is None:
                self._outage_since = now
            self._link_notes.update(last_error=detail, last_error_at=now, outage_since=self._outage_since)
        self._resolve_now.set()

    async def _resolve_loop(self) -> None:
        failing = False
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RESOLVE_EVERY):
                    await self._resolve_now.wait()
            self._resolve_now.clear()
            try:
                await self._resolve()
            except SpoolError as exc:  # a full disk: the answers wait in memory (at worst, sent again)
                if not failing:
                    log.error("cannot resolve answers in the spool; retrying", error=str(exc),
                              was="cannot settle answers in the spool; retrying")
                failing = True
                await asyncio.sleep(1.0)
                continue
            if failing:
                log.info("answers resolved in the spool again", was="answers settled in the spool again")
            failing = False

    async def _resolve(self) -> None:
        done, refused, notes = self._done, self._refused, self._link_notes
        if not (done or refused or notes):
            return
        self._done, self._refused, self._link_notes = [], [], {}
        try:
            if done or refused:
                await self.spool.resolve(done, refused)
            if notes:
                await self.spool.note(**notes)
        except BaseException:
            self._done[:0], self._refused[:0] = done, refused
            self._link_notes = {**notes, **self._link_notes}
            raise
        self.answered += len(done)


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Wait until the first of ``waits`` ends."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def forward_until_stopped(forwarder: Forwarder, stop: asyncio.Event, grace: float) -> None:
    """Run ``forwarder`` until ``stop`` is set, then give what is in flight ``grace`` seconds to be answered;
    anything not answered by then stays in the spool for the next start."""
    task = asyncio.create_task(forwarder.run(), name="forwarder")
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
            return
        forwarder.finish()
        # The grace is for answers: with none awaited, a feeder whose push daemon went away (as it does when a
        # whole suite stops) stops at once instead of retrying the link for the whole grace.
        answered = asyncio.create_task(forwarder.all_answered())
        try:
            done, _ = await asyncio.wait({task, answered}, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered.cancel()
        if task in done:
            task.result()
            return
        if answered not in done:
            log.warning("records still unanswered at shutdown stay in the spool", grace_seconds=grace)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
