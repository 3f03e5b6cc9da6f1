"""The store's facets: what each part of dataq may ask of it, and nothing more.

:class:`~dataq.store.QueueStore` is one object (one client, one queue's keys and scripts) that answers all of
them; a caller is typed with the facet it uses, so a reader sees at once what a part of dataq can do to a queue,
and mypy refuses a call outside it:

* :class:`RecordPath`: the record path, as the daemons run it: push, claim, and write outcomes;
* :class:`Sweeping`: giving back what dead workers held, and the due retries, and the events' trimming;
* :class:`CustodyFacet`: custody across sites: keeping records handed on, the steps taken on receipts, and what
  this site answers of an id;
* the whole :class:`~dataq.store.QueueStore`: the operator's (``dataq-cli``, the web console), which may do all.

The remembered done ids have no facet of their own: the scripts of the record path and of custody read and
write them, and no caller touches them apart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from dataq.record import Record
from dataq.store.custody import CustodyEntry, CustodyStep, Known
from dataq.store.lifecycle import NO_DELAY
from dataq.store.types import Claim, FailOutcome, PushResult, Reclaimed, RecordState, RetryPolicy


class OfQueue(Protocol):
    """Every facet is of one queue."""

    queue: str
    """The queue's name."""


class RecordPath(OfQueue, Protocol):
    """Pushing records, claiming them into a worker's processing list, and writing their outcomes."""

    def push_records(self, items: Sequence[tuple[Record, str]], now: float | None = None, *,
                           retry: bool = False, on_written: Callable[[], None] | None = None) -> Awaitable[PushResult]:
        """Store records pushed from their sources (``record, source`` pairs); see ``push_batch.lua``."""
        ...

    def claim(self, worker: str, max_count: int) -> Awaitable[Claim]:
        """Move up to ``max_count`` runnable records into ``worker``'s processing list."""
        ...

    def ack(self, worker: str, done: Sequence[tuple[str, str]]) -> Awaitable[list[bool]]:
        """Records done; per record, whether it was still ``worker``'s."""
        ...

    def fail(self, worker: str, failures: Sequence[tuple[str, str]], *, max_errors: int,
                   retry: RetryPolicy = NO_DELAY, now: float | None = None) -> Awaitable[list[FailOutcome]]:
        """Records failed: retried, delayed or deactivated."""
        ...

    def postpone(self, worker: str, waiting: Sequence[tuple[str, str]]) -> Awaitable[list[bool]]:
        """Records whose destination is unreachable: back to the next-to-run end, no failure counted."""
        ...

    def processing(self, worker: str) -> Awaitable[list[str]]:
        """The ids in ``worker``'s processing list."""
        ...

    def record_state(self, record_id: str) -> Awaitable[RecordState | None]:
        """Where a record is (None: not tracked)."""
        ...


class Sweeping(OfQueue, Protocol):
    """What a pop daemon's sweeper does beside its workers."""

    def promote_due(self, now: float | None = None) -> Awaitable[int]:
        """Delayed records whose retry is due, back to the queue; how many."""
        ...

    def dead_workers(self) -> Awaitable[list[str]]:
        """Registered workers whose heartbeat has lapsed."""
        ...

    def reclaim_dead(self, worker: str, max_crashes: int) -> Awaitable[Reclaimed | None]:
        """Give a dead worker's records back (None: another sweeper did)."""
        ...

    def trim_events(self, max_age: float, now: float | None = None) -> Awaitable[int]:
        """Drop events older than ``max_age`` seconds."""
        ...

    def adopt_unserved(self) -> Awaitable[int]:
        """Records of activities the settings do not define, to default's list; how many."""
        ...


class CustodyFacet(OfQueue, Protocol):
    """Custody across sites (:mod:`dataq.custody`): its entries, the steps taken on receipts, and what this site
    answers about an id."""

    def keep(self, entries: Sequence[CustodyEntry], first_ask: float, now: float | None = None) -> Awaitable[int]:
        """Put records in custody (or keep them there); the number in custody after."""
        ...

    def custody_due(self, limit: int, now: float | None = None) -> Awaitable[list[CustodyEntry]]:
        """Records whose next site is due to be asked."""
        ...

    def custody(self, ids: Sequence[str]) -> Awaitable[dict[str, CustodyEntry]]:
        """The custody entries of those ``ids`` in custody."""
        ...

    def custody_count(self) -> Awaitable[int]:
        """Records in custody."""
        ...

    def oldest_in_custody(self, limit: int) -> Awaitable[list[CustodyEntry]]:
        """The records longest in custody, the oldest first."""
        ...

    def apply_steps(self, steps: Sequence[CustodyStep], resend_wait: float,
                          now: float | None = None) -> Awaitable[list[bool]]:
        """Take the steps decided on what the next sites answered."""
        ...

    def whereabouts(self, ids: Sequence[str], max_errors: int) -> Awaitable[list[Known]]:
        """What this site knows of each id: what a receipts query is answered from."""
        ...

    def receipt_latencies(self, since: float) -> Awaitable[list[float]]:
        """End-to-end latencies (seconds) of the receipts taken since ``since``."""
        ...


class PushPath(RecordPath, CustodyFacet, Protocol):
    """A push daemon's: records in, and receipts answered on the same connections."""
