"""A pop worker's slots, in one object: which records it holds and how many of them still run.

A record is *held* from its claim until its outcome is written (:mod:`dataq.pop.outcomes`): running, or finished
and waiting for Redis to take its outcome. Of the held, those whose actions have not ended are *running*. The
rules, which ``tests/unit/test_ledger.py`` checks over any sequence of claims, ends and writes:

* at most ``concurrency`` records run, and at most ``concurrency`` finished records wait for their outcomes to
  be written (``2 * concurrency`` held): an outage of Redis pauses claiming instead of piling up outcomes;
* while a record goes back to the head of the queue (a postponement not yet written) nothing is claimed, or
  the claim would take records past it and it would lose its place;
* while a destination is unreachable, one record runs at a time as a probe, and only when nothing else runs;
* an id may be held twice: a record whose failure was written by a call whose reply was lost is runnable again
  and may be claimed again before that reply's retry (:meth:`SlotLedger.claim` says so, and the outcome writer
  drops the stale outcome).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


class SlotLedger:
    """The slots of a worker that runs ``concurrency`` records at a time (see the module's docstring)."""

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self._held: Counter[str] = Counter()
        self._running = 0

    @property
    def running(self) -> int:
        """Records whose actions have not ended."""
        return self._running

    @property
    def held(self) -> int:
        """Records claimed whose outcomes are not written yet (running ones included)."""
        return self._held.total()

    def holds(self, record_id: str) -> bool:
        return self._held[record_id] > 0

    def ids(self) -> set[str]:
        """The ids held."""
        return set(self._held)

    def claim(self, record_id: str) -> bool:
        """A record was claimed and starts running; True if an earlier claim of it is still held (its outcome
        waits to be written, and must not be: it was applied by a call whose reply was lost)."""
        again = self._held[record_id] > 0
        self._held[record_id] += 1
        self._running += 1
        return again

    def end(self) -> None:
        """A record's actions ended (its outcome goes to the writer)."""
        if self._running <= 0:
            raise RuntimeError("an action ended that the ledger never saw start")
        self._running -= 1

    def written(self, ids: Iterable[str]) -> None:
        """The outcomes of ``ids`` reached Redis (or were dropped as stale): their slots are free. An id not held
        (a stale outcome's second write) frees nothing."""
        held = self._held
        for record_id in ids:
            if held[record_id] > 1:
                held[record_id] -= 1
            else:
                held.pop(record_id, None)

    def free(self, *, postponing: bool, unreachable: bool, probe_running: bool) -> int:
        """Records the next claim may take, under the rules of the module's docstring."""
        if postponing:
            return 0
        free = min(self.concurrency - self._running, 2 * self.concurrency - self.held)
        if unreachable:
            return min(free, 1) if not self._running and not probe_running else 0
        return max(free, 0)
