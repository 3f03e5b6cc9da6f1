"""The sweeper: gives the records of dead workers back, promotes due retries, trims old events, and adopts the
records of activities the settings no longer define.

Every pop daemon runs one. Running many at once is safe: each step is one atomic script that re-checks the
worker's heartbeat, so a second sweeper finds nothing left to move.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dataq.config import EventSettings, PopSettings
from dataq.logs import get_logger
from dataq.ops.notices import Notifier, crash_loop_notice
from dataq.store.facets import Sweeping

TRIM_INTERVAL = 60.0
"""Seconds between two trims of the event stream by age (trimming is cheap, but there is no hurry)."""

log = get_logger()


@dataclass(frozen=True, slots=True)
class Sweep:
    """What one sweep did."""

    reclaimed_workers: int = 0
    returned: int = 0
    deactivated: int = 0
    promoted: int = 0


class Sweeper:
    def __init__(self, store: Sweeping, pop: PopSettings, events: EventSettings, notifier: Notifier, *,
                 own_worker: str | None = None) -> None:
        self.store = store
        self.own_worker = own_worker
        """The worker of this daemon: alive by definition, even when a Redis outage has expired its heartbeat
        (taking its records back would count a crash against every one of them)."""
        self.pop = pop
        self.events = events
        self.notifier = notifier
        self._last_trim: float | None = None

    async def sweep(self) -> Sweep:
        """One pass: dead workers' records back to the next-to-run end (poison ones inactive), due retries in."""
        workers = returned = deactivated = 0
        for worker in await self.store.dead_workers():
            if worker == self.own_worker:
                continue
            result = await self.store.reclaim_dead(worker, max_crashes=self.pop.max_crashes)
            if result is None:  # it beat its heart between the two calls: alive after all
                continue
            workers += 1
            returned += result.returned
            deactivated += result.deactivated
            if result.returned or result.deactivated:
                log.warning("returned the records of a dead worker", dead_worker=worker, returned=result.returned,
                            deactivated=result.deactivated)
            if result.deactivated:
                self.notifier.post(crash_loop_notice(self.store.queue, worker, result.deactivated,
                                                     self.pop.max_crashes))
        promoted = await self.store.promote_due()
        now = time.monotonic()
        if self._last_trim is None or now - self._last_trim >= TRIM_INTERVAL:
            await self.store.trim_events(self.events.max_age)
            # Records of an activity these settings no longer define would wait for ever in a list no claim
            # looks at: they run as default's instead.
            adopted = await self.store.adopt_unserved()
            if adopted:
                log.warning("records of activities these settings do not define now run as default's",
                            adopted=adopted)
            self._last_trim = now
        return Sweep(workers, returned, deactivated, promoted)
