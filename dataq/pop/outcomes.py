"""Writing the outcomes of finished records: every outcome since the last store call goes in one ``ack``, one
``fail`` and one ``postpone`` (records that wait for an unreachable destination, their failures not counted).

Outcomes are kept until Redis has taken them (a StoreUnavailable is retried with backoff, never dropped), and a
worker's slot is freed only once its record's outcome is written, so an outage pauses claiming instead of piling
up outcomes that cannot be written. Retrying a call whose reply was lost is safe: the store answers "not owned"
for records whose outcome the lost call already wrote, and those are only logged.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from dataq.config import QueueSettings
from dataq.errors import StoreUnavailable
from dataq.logs import get_logger
from dataq.ops.notices import Notifier, inactive_records_notice
from dataq.record import Record
from dataq.runtime.backoff import HOT_RETRY_CAP, Backoff
from dataq.runtime.supervise import Pulse
from dataq.store import FailOutcome, RetryPolicy
from dataq.store.facets import RecordPath

OUTCOME_BATCH_MAX = 1000
"""Most records in one ack or fail call (bounds the Lua script's argument list and its run time)."""
LOGGED_IDS_MAX = 20
"""Ids named in one log event about many records."""

FailureObserver = Callable[[str, str], None]
"""Told of every failure written (id, message): the systemic-failure watch listens here."""

T = TypeVar("T")

log = get_logger()


class OutcomeWriter:
    """Collects the outcomes of one worker's records and writes them in batches (run :meth:`run` as a task)."""

    def __init__(
        self,
        store: RecordPath,
        worker_id: str,
        queue: QueueSettings,
        notifier: Notifier,
        on_written: Callable[[list[str]], None],
        *,
        on_failure: FailureObserver | None = None,
    ) -> None:
        """``on_written`` gets the ids whose results Redis took (their slots are free); ``on_failure`` each
        failure written."""
        self.store = store
        self.worker_id = worker_id
        self.queue = queue
        self.notifier = notifier
        self.on_written = on_written
        self.on_failure = on_failure
        self.acknowledged = 0
        """Records acknowledged so far (for the heartbeat)."""
        self.failures = 0
        """Failures counted so far (retried, delayed or deactivated)."""
        self.deactivated = 0
        """Records this worker's failures moved to the inactive list."""
        self.postponements = 0
        """Times a record went back to wait for an unreachable destination."""
        self._stale: Counter[str] = Counter()
        """Id -> waiting results of it that must not be sent (see :meth:`claimed_again`)."""
        self._done: list[tuple[str, str]] = []
        self._failed: list[tuple[Record, str]] = []
        self._waiting: list[tuple[Record, str]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._outage = False
        self.pulse = Pulse()
        """Turns with every batch written and every attempt at one; rests while there is nothing to write."""

    @property
    def pending(self) -> int:
        """Results not yet taken by Redis."""
        return len(self._done) + len(self._failed) + len(self._waiting)

    @property
    def postponing(self) -> bool:
        """Records wait to go back to the head of the queue (claims wait for them, so they keep their place)."""
        return bool(self._waiting)

    def succeeded(self, record: Record, seconds: float) -> None:
        self._done.append((record.id, f"duration_ms={round(seconds * 1000)}"))
        self._idle.clear()
        self._wake.set()

    def failed(self, record: Record, message: str) -> None:
        self._failed.append((record, message))
        self._idle.clear()
        self._wake.set()

    def postponed(self, record: Record, message: str) -> None:
        """The record's destination is unreachable: back to the next-to-run end, its failure not counted."""
        self._waiting.append((record, message))
        self._idle.clear()
        self._wake.set()

    def claimed_again(self, record_id: str) -> None:
        """The worker claimed ``record_id`` while a result of an earlier claim of it still waits here.

        Only a written record can be claimed again, so that result was applied by a call whose reply was lost;
        sent again it would hit the new claim (an ack would forget it, a fail would queue it again while it
        runs). It is dropped at the next write, and the earlier claim's slot freed.
        """
        waiting = (sum(1 for i, _ in self._done if i == record_id)
                   + sum(1 for r, _ in (*self._failed, *self._waiting) if r.id == record_id))
        self._stale[record_id] = waiting
        if waiting:
            self._idle.clear()
            self._wake.set()

    def _drop_stale(self) -> None:
        if not +self._stale:
            return
        dropped: list[str] = []
        left = self._stale.copy()
        def kept(entries: list[T], id_of: Callable[[T], str]) -> list[T]:
            keep = []
            for entry in entries:
                if left[id_of(entry)] > 0:
                    left[id_of(entry)] -= 1
                    dropped.append(id_of(entry))
                else:
                    keep.append(entry)
            return keep

        self._done = kept(self._done, lambda entry: entry[0])
        self._failed = kept(self._failed, lambda entry: entry[0].id)
        self._waiting = kept(self._waiting, lambda entry: entry[0].id)
        self._stale = Counter()
        log.info("results already written by a call whose reply was lost; not sent again", ids=dropped[:LOGGED_IDS_MAX],
                 was="results already settled by a call whose reply was lost; not sent again")
        self.on_written(dropped)

    def _sent(self, ids: list[str]) -> None:
        """These results reached Redis: none of them is waiting any more, stale or not."""
        for record_id in ids:
            if self._stale[record_id] > 0:
                self._stale[record_id] -= 1

    async def written(self) -> None:
        """Return once every result so far is written."""
        await self._idle.wait()

    async def run(self) -> None:
        """Write outcomes as they come, until cancelled; keep them through Redis outages."""
        backoff = Backoff(cap=HOT_RETRY_CAP)
        while True:
            self.pulse.beat()
            if not self.pending:
                self._idle.set()
                with self.pulse.resting():
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self._write_batch(retry=self._outage)
            except StoreUnavailable as exc:
                if not self._outage:
                    log.warning("redis unavailable; keeping results until it returns", pending=self.pending,
                                error=str(exc))
                    self._outage = True
                await backoff.wait()
            else:
                if self._outage:
                    log.info("redis is back; writing kept results", pending=self.pending,
                             was="redis is back; settling kept results")
                    self._outage = False
                backoff.reset()

    async def _write_batch(self, *, retry: bool) -> None:
        self._drop_stale()
        if self._done:
            batch = self._done[:OUTCOME_BATCH_MAX]
            owned = await self.store.ack(self.worker_id, batch)
            del self._done[: len(batch)]
            self._sent([record_id for record_id, _ in batch])
            self.acknowledged += sum(owned)
            self._report_lost([record_id for (record_id, _), mine in zip(batch, owned, strict=True) if not mine], retry)
            self.on_written([record_id for record_id, _ in batch])
        if self._failed:
            failures = self._failed[:OUTCOME_BATCH_MAX]
            outcomes = await self.store.fail(
                self.worker_id,
                [(record.id, message) for record, message in failures],
                max_errors=self.queue.max_errors,
                retry=RetryPolicy.of(self.queue),
            )
            del self._failed[: len(failures)]
            self._sent([record.id for record, _ in failures])
            self.failures += sum(outcome is not FailOutcome.NOT_OWNED for outcome in outcomes)
            self.deactivated += sum(outcome is FailOutcome.INACTIVE for outcome in outcomes)
            pairs = list(zip(failures, outcomes, strict=True))
            if self.on_failure is not None:
                for (record, message), outcome in pairs:
                    if outcome is not FailOutcome.NOT_OWNED:
                        self.on_failure(record.id, message)
            self._report_lost([record.id for (record, _), outcome in pairs if outcome is FailOutcome.NOT_OWNED], retry)
            self._report_inactive([failure for failure, outcome in pairs if outcome is FailOutcome.INACTIVE])
            self.on_written([record.id for record, _ in failures])
        if self._waiting:
            waiting = self._waiting[:OUTCOME_BATCH_MAX]
            owned = await self.store.postpone(self.worker_id, [(record.id, message) for record, message in waiting])
            del self._waiting[: len(waiting)]
            self._sent([record.id for record, _ in waiting])
            self.postponements += sum(owned)
            self._report_lost([record.id for (record, _), mine in zip(waiting, owned, strict=True) if not mine], retry)
            self.on_written([record.id for record, _ in waiting])

    def _report_lost(self, ids: list[str], retry: bool) -> None:
        if ids and retry:
            # Most likely written by the call whose reply the outage lost; or swept back meanwhile.
            log.info("records already written (by a call whose reply was lost) or taken back",
                     was="records already settled (by a call whose reply was lost) or taken back",
                     count=len(ids), ids=ids[:LOGGED_IDS_MAX])
        elif ids:
            # The sweeper took these back while they ran (our heartbeat had lapsed): they are queued again and
            # belong to whoever claims them next, so this result must not touch them.
            log.warning("results dropped for records no longer ours (returned to the queue while they ran)",
                        count=len(ids), ids=ids[:LOGGED_IDS_MAX])

    def _report_inactive(self, failures: list[tuple[Record, str]]) -> None:
        if not failures:
            return
        records: list[dict[str, Any]] = [
            {"id": record.id, "path": record.path, "size": record.size, "last_error": message}
            for record, message in failures
        ]
        for entry in records[:LOGGED_IDS_MAX]:
            log.warning("record moved to the inactive queue", **entry)
        self.notifier.post(inactive_records_notice(self.queue.name, self.worker_id, self.queue.max_errors, records))
