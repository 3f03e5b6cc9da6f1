"""Group commit: every record the push daemon reads reaches Redis in a batch, and is answered only after.

Connections parse their lines and hand them over as :class:`Submission` s (records and refusals, in line order).
One :class:`Committer` task takes everything pending (up to ``batch_max`` records) and stores it with one
round trip, so a pipelining feeder is not held to one round trip per record, while a feeder that waits for
each reply gets its reply as soon as its batch is stored. A second batch may go to Redis while the first is
there (never with records of the same connection). Submissions are answered in the order they came, which
keeps each connection's replies in line order; the backlog of unanswered lines is bounded.

When Redis fails, the committer retries the same batch, with the same push time and sources, until it is
stored (the store reports a record the lost attempt stored as pushed, not as a duplicate): nothing is
acknowledged that Redis does not hold, and a valid line never gets an ``Error`` for a Redis problem, but one:
with ``min_replicas``, a batch that too few replicas confirmed in time is answered ``Error: not replicated ...``
(:mod:`.unconfirmed` makes the resends come back ``Pushed``), as holding it could hold every feeder for as long
as a replica is missing. Any other
exception is a bug: it ends the committer, and with it the daemon (its supervisor sees to that); the records
stay unanswered, and their feeders send them again to the restarted daemon.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from dataq.audit.questions import AUDIT_KEY, AuditDesk, Copies
from dataq.custody.desk import ReceiptDesk
from dataq.custody.receipts import ReceiptQuery
from dataq.errors import NotReplicated, StoreError
from dataq.handshake import Hello
from dataq.logs import get_logger
from dataq.protocol import error_reply, ignored_reply, pushed_reply
from dataq.push.gate import BLOCK_BACKLOG, BLOCK_REDIS, Gate
from dataq.push.unconfirmed import Item, Replay, Unconfirmed
from dataq.record import Record
from dataq.runtime.backoff import HOT_RETRY_CAP, Backoff
from dataq.runtime.supervise import Pulse
from dataq.store import Known
from dataq.store.facets import PushPath

PIPELINE_DEPTH = 2
"""Batches at Redis at once (see :meth:`Committer.run`)."""
REPLICATED_PIPELINE_DEPTH = 8
"""Batches at Redis at once when each waits for replicas (``min_replicas``): most of them are written and only
wait, and the writes of one feeder follow each other without waiting for the replicas in between."""
BACKLOG_LIMIT = 100_000
"""Entries waiting for the committer above which the daemon stops reading every socket (bounds memory)."""
BACKLOG_RESUME = BACKLOG_LIMIT // 2
"""Entries below which reading resumes after :data:`BACKLOG_LIMIT` was hit (hysteresis: no flapping)."""

log = get_logger()
_stdlib_log = logging.getLogger(__name__)


class ReplySink(Protocol):
    """Where a submission's replies go: one feeder connection."""

    peer: str

    def deliver(self, payload: bytes, count: int) -> None:
        """Send ``payload`` (the replies to ``count`` lines) to the peer, if it is still connected."""


Entry = Record | str | ReceiptQuery | Hello
"""One line as the connection read it: a record, the message of a refused line, a receipts query, or the
handshake's hello."""


@dataclass(slots=True)
class Submission:
    """Lines of one connection in order (:data:`Entry`)."""

    sink: ReplySink
    entries: list[Entry]
    records: int
    """How many entries are Records."""


@dataclass(slots=True)
class CommitStats:
    pushed: int = 0
    ignored: int = 0
    errors: int = 0
    batches: int = 0
    receipts: int = 0
    """Ids asked about in receipts queries."""


class Committer:
    """The one task of a push daemon that writes records to Redis and answers feeders."""

    def __init__(
        self,
        store: PushPath,
        gate: Gate,
        *,
        batch_max: int,
        after_batch: Callable[[int], Awaitable[None]],
        depth: int = PIPELINE_DEPTH,
        desk: ReceiptDesk | None = None,
        audit_desk: AuditDesk | None = None,
    ) -> None:
        """The committer closes ``gate`` while Redis fails and while the backlog is above :data:`BACKLOG_LIMIT`
        (until it falls under :data:`BACKLOG_RESUME`); ``after_batch`` gets the active list's length after each
        stored batch."""
        self.store = store
        self.gate = gate
        self.desk = desk or ReceiptDesk(store.queue, 0)
        """Answers receipts queries."""
        self.audit_desk = audit_desk or AuditDesk(self.desk.site, self.desk.max_errors, self.desk.next_sites)
        """Answers audit questions."""
        self.batch_max = batch_max
        self.depth = depth
        self.stats = CommitStats()
        self.pulse = Pulse()
        """Turns with every batch and every attempt at one; rests while there is nothing to commit."""
        self.unconfirmed = Unconfirmed()
        """Records answered "not replicated", whose resends repeat the same write."""
        self._after_batch = after_batch
        self._pending: deque[Submission] = deque()
        self._backlog = 0
        self._full = False
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def backlog(self) -> int:
        """Entries submitted and not answered yet."""
        return self._backlog

    def submit(self, sink: ReplySink, entries: list[Entry], records: int) -> None:
        self._pending.append(Submission(sink, entries, records))
        self._backlog += len(entries)
        self._idle.clear()
        self._wakeup.set()
        if not self._full and self._backlog >= BACKLOG_LIMIT:
            self._full = True
            self.gate.block(BLOCK_BACKLOG)

    async def drain(self, grace: float) -> bool:
        """Wait until every submission is answered; False if ``grace`` seconds were not enough."""
        try:
            async with asyncio.timeout(grace):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Commit forever (until cancelled), keeping up to ``depth`` batches at Redis at once.

        A second batch in flight lets Redis run one batch while this process answers the previous one and
        packs the next, instead of each waiting for the other. Batches being written at the same time never
        hold records of the same connection: Redis may finish a later batch first (it reads a big command in
        pieces), and a feeder's records must enter the queue in the order it sent them. A batch that the master
        holds and only waits for its replicas (``min_replicas``) no longer holds its connections back. Answers go
        out in submission order.
        """
        commits: deque[_Commit] = deque()
        wake = self._wakeup
        loop = asyncio.get_running_loop()
        try:
            while True:
                while self._pending and len(commits) < self.depth:
                    taken = self._take({s.sink for commit in commits if commit.writing for s in commit.batch})
                    if taken is None:
                        break
                    written: asyncio.Future[None] = loop.create_future()
                    task = asyncio.create_task(self._store(*taken, written))
                    commits.append(_Commit(taken[0], task, written))
                if commits and commits[0].task.done():
                    commit = commits.popleft()
                    await self._finish(commit.batch, commit.task.result())
                    continue
                # Woken by a submission, a written or a finished batch; nothing can happen between the checks
                # and here.
                wake.clear()
                if commits:
                    await wake.wait()
                else:
                    self._idle.set()
                    with self.pulse.resting():
                        await wake.wait()
                self.pulse.beat()
        finally:
            for commit in commits:
                commit.task.cancel()

    async def _finish(self, batch: list[Submission], stored: _Stored | None) -> None:
        self._answer(batch, stored)
        if self._full and self._backlog < BACKLOG_RESUME:
            self._full = False
            self.gate.block(BLOCK_BACKLOG, False)
        if stored and stored.wrote and stored.error is None:
            await self._after_batch(stored.active_length)

    def _take(self, busy: set[ReplySink]) -> tuple[list[Submission], int] | None:
        """The oldest submissions, up to ``batch_max`` records, stopping at one whose connection has records at
        Redis (``busy``); None if the oldest is such a one."""
        pending = self._pending
        if pending[0].sink in busy:
            return None
        batch = [pending.popleft()]
        records = batch[0].records
        while pending and records + pending[0].records <= self.batch_max and pending[0].sink not in busy:
            submission = pending.popleft()
            batch.append(submission)
            records += submission.records
        return batch, records

    async def _store(self, batch: list[Submission], records: int, written: asyncio.Future[None]) -> _Stored | None:
        """Store the batch's records, retrying until Redis has them (None if the batch holds none); ``written``
        is set once the master holds them all. Each of the two wakes the committer, from here rather than from
        a done-callback: a callback would cost every batch one more turn of the event loop."""
        on_written = _setter(written, self._wakeup)
        try:
            stored = await self._store_records(batch, records, on_written)
            queries = [e for s in batch for e in s.entries if isinstance(e, ReceiptQuery)]
            if queries:
                # After the batch's records: a query answers for what the lines before it pushed.
                stored = stored or _Stored([], 0, wrote=False)
                stored.known = await self._known([record_id for query in queries for record_id in query.valid])
                audited = [record_id for query in queries if query.key == AUDIT_KEY for record_id in query.valid]
                if audited:
                    stored.copies = await self._copies(audited)
            return stored
        finally:
            on_written()
            self._wakeup.set()  # the task is done by the time the woken committer runs

    async def _store_records(self, batch: list[Submission], records: int,
                             on_written: Callable[[], None]) -> _Stored | None:
        if not records:
            return None
        # A hand-on names the site it comes from (parsed into its source): stored as site@peer.
        items = [(e, s.sink.peer if e.source is None else f"{e.source}@{s.sink.peer}")
                 for s in batch for e in s.entries if isinstance(e, Record)]
        # One push time for every attempt: it is what lets the store recognise a retried write.
        now = time.time()
        replays = self.unconfirmed.replays(items)
        backoff = Backoff(cap=HOT_RETRY_CAP)
        while True:
            self.pulse.beat()
            try:
                stored = await self._push(items, now, replays, retry=backoff.attempt > 0, on_written=on_written)
            except NotReplicated as exc:
                # Redis took the batch, its replicas did not confirm it: refused, and the feeders send it again.
                log.warning("records not replicated in time; answering them with an error", error=str(exc),
                            records=len(items), confirmed_by=exc.confirmed)
                self.unconfirmed.remember(items, now, replays)
                stored = _Stored([], 0, error=str(exc))
            except StoreError as exc:
                if backoff.attempt == 0:
                    log.warning("cannot store records; holding their replies and retrying", error=str(exc),
                                records=len(items))
                    self.gate.block(BLOCK_REDIS)
                await backoff.wait()
                continue
            else:
                self.unconfirmed.confirmed(items)
            if backoff.attempt:
                log.info("records stored again after a failure", records=len(items), attempts=backoff.attempt + 1)
                self.gate.block(BLOCK_REDIS, False)
            return stored

    async def _known(self, ids: list[str]) -> list[Known]:
        """What this site knows of ``ids`` (for receipts), retrying while Redis fails, as records are."""
        backoff = Backoff(cap=HOT_RETRY_CAP)
        while True:
            self.pulse.beat()
            try:
                return await self.store.whereabouts(ids, self.desk.max_errors)
            except StoreError as exc:
                if backoff.attempt == 0:
                    log.warning("cannot read receipts; holding their answers and retrying", error=str(exc))
                await backoff.wait()

    async def _copies(self, ids: list[str]) -> Copies:
        """The stored copies of ``ids`` (audit questions), read off the event loop."""
        return await asyncio.to_thread(self.audit_desk.copies_said, ids)

    async def _push(self, items: list[Item], now: float, replays: list[Replay], *, retry: bool,
                    on_written: Callable[[], None]) -> _Stored:
        """One attempt: the resends of unconfirmed writes repeat those writes, the rest is written at ``now``;
        ``on_written`` once the master holds the last of them."""
        if not replays:
            result = await self.store.push_records(items, now=now, retry=retry, on_written=on_written)
            return _Stored(result.pushed, result.active_length)
        pushed = [False] * len(items)
        replayed = {position for replay in replays for position in replay.positions}
        for replay in replays:
            result = await self.store.push_records(replay.items, now=replay.pushed_at, retry=True)
            for position, was_pushed in zip(replay.positions, result.pushed, strict=True):
                pushed[position] = was_pushed
        rest = [position for position in range(len(items)) if position not in replayed]
        if rest:
            result = await self.store.push_records([items[i] for i in rest], now=now, retry=retry,
                                                   on_written=on_written)
            for position, was_pushed in zip(rest, result.pushed, strict=True):
                pushed[position] = was_pushed
        return _Stored(pushed, result.active_length)

    def _answer(self, batch: list[Submission], stored: _Stored | None) -> None:
        """Answer each line: its refusal, the batch's error for every record when it failed, else pushed or not;
        a receipts query with its answers."""
        pushed, error = (stored.pushed, stored.error) if stored else ([], None)
        known = iter(stored.known if stored else [])
        stats = self.stats
        stats.batches += 1
        debug = _stdlib_log.isEnabledFor(logging.DEBUG)
        index = 0
        for submission in batch:
            parts: list[str] = []
            peer = submission.sink.peer
            for entry in submission.entries:
                if isinstance(entry, str):
                    parts.append(error_reply(entry))
                    stats.errors += 1
                    continue
                if isinstance(entry, Hello):
                    parts.append(entry.answer().decode())
                    continue
                if isinstance(entry, ReceiptQuery):
                    about = [next(known) for _ in entry.valid]
                    if entry.key == AUDIT_KEY:
                        parts.append(self.audit_desk.lines(entry, about, stored.copies if stored else {}))
                    else:
                        parts.append(self.desk.lines(entry, about))
                    stats.receipts += len(entry.ids)
                    continue
                checksum = entry.checksum
                if error is not None:
                    parts.append(error_reply(error))
                    stats.errors += 1
                elif pushed[index]:
                    parts.append(pushed_reply(checksum))
                    stats.pushed += 1
                    if debug:
                        log.debug("pushed", id=checksum, path=entry.path, size=entry.size, peer=peer)
                else:
                    parts.append(ignored_reply(checksum))
                    stats.ignored += 1
                    log.warning("ignored a duplicate: the id is already tracked", id=checksum, path=entry.path,
                                peer=peer)
                index += 1
            self._backlog -= len(submission.entries)
            submission.sink.deliver("".join(parts).encode(), len(submission.entries))


def _setter(future: asyncio.Future[None], wake: asyncio.Event) -> Callable[[], None]:
    def set_once() -> None:
        if not future.done():
            future.set_result(None)
            wake.set()

    return set_once


@dataclass(slots=True)
class _Commit:
    """A batch at Redis."""

    batch: list[Submission]
    task: asyncio.Task[_Stored | None]
    written: asyncio.Future[None]
    """Set once the master holds the batch (it may still wait for replicas)."""

    @property
    def writing(self) -> bool:
        return not self.written.done()


@dataclass(slots=True)
class _Stored:
    pushed: list[bool]
    active_length: int
    error: str | None = None
    """Why every record of the batch is refused (not replicated), or None."""
    wrote: bool = True
    """Whether the batch had records to write (``active_length`` is then the active list's length after)."""
    known: list[Known] = field(default_factory=list)
    """What is known of the ids of the batch's receipts queries and audit questions, in order."""
    copies: Copies = field(default_factory=dict)
    """The stored copies of the ids of the batch's audit questions."""
