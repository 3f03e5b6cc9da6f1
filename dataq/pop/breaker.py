"""Circuit breakers per destination: an outage pauses the queue's work instead of failing its records.

A pop daemon runs one queue, and each record of it runs every action of the queue, so a record can only finish
when every destination of the queue answers. After ``unreachable_after`` transient failures in a row against one
destination, it is **unreachable**: the daemon stops claiming, and sends one record at a time as a probe, first
after ``probe_delay`` seconds, then after twice as long each time, up to ``probe_max_delay`` (each wait shortened
at random by up to half, so daemons do not probe in lock-step: :class:`~dataq.runtime.backoff.Backoff`). The
records wait in the active list meanwhile, their error counts untouched. The first record that succeeds ends
every outage (it reached every destination), and claiming resumes at full concurrency. A permanent failure of a
probe says nothing of the destination, so the next probe goes at once.

The clocks are parameters, so the back-off is tested without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dataq.runtime.backoff import Backoff


@dataclass(slots=True)
class Outage:
    """One unreachable destination, as the heartbeat publishes it and notices report it."""

    destination: str
    since: float
    """Wall-clock time the destination was marked unreachable."""
    error: str
    """The last transient failure against it."""
    probes: int = 0
    """Probes that failed since."""

    def public(self, next_probe_in: float) -> dict[str, object]:
        return {"destination": self.destination, "since": self.since, "error": self.error, "probes": self.probes,
                "next_probe_in": round(max(0.0, next_probe_in), 3)}


OutageObserver = Callable[[Outage], None]
"""Told when an outage starts, and when it ends (the outage's ``since`` says how long it lasted)."""


class Breakers:
    """The circuit breakers of one pop daemon, one per destination."""

    def __init__(
        self,
        threshold: int,
        probe_delay: float,
        probe_max_delay: float,
        *,
        on_open: OutageObserver | None = None,
        on_close: OutageObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.threshold = threshold
        self._backoff = Backoff(initial=probe_delay, cap=probe_max_delay)
        self._on_open, self._on_close = on_open, on_close
        self._clock, self._wall_clock = clock, wall_clock
        self._streaks: dict[str, int] = {}
        """Destination -> transient failures in a row (reset by any success)."""
        self._outages: dict[str, Outage] = {}
        self._next_probe = 0.0
        self.probe_running = False

    @property
    def open(self) -> bool:
        """Some destination is unreachable: claim only probes."""
        return bool(self._outages)

    def outages(self) -> list[Outage]:
        return list(self._outages.values())

    def public(self) -> list[dict[str, object]]:
        """The outages for the heartbeat (``dataq-cli --summary`` reads them there)."""
        wait = self.until_probe()
        return [outage.public(wait) for outage in self._outages.values()]

    def until_probe(self) -> float:
        """Seconds until the next probe may be claimed (0: now)."""
        return max(0.0, self._next_probe - self._clock())

    def probe_started(self) -> None:
        self.probe_running = True

    def transient(self, destination: str, error: str, *, probe: bool = False) -> None:
        """A record failed because ``destination`` could not be reached."""
        if probe:
            self.probe_running = False
        streak = self._streaks.get(destination, 0) + 1
        self._streaks[destination] = streak
        outage = self._outages.get(destination)
        if outage is not None:
            outage.error = error
            if probe:
                outage.probes += 1
                self._schedule_probe()
            return
        if streak < self.threshold:
            return
        first = not self._outages
        outage = self._outages[destination] = Outage(destination, self._wall_clock(), error)
        if first:
            self._backoff.reset()
            self._schedule_probe()
        if self._on_open is not None:
            self._on_open(outage)

    def permanent(self, *, probe: bool = False) -> None:
        """A record failed through its own fault: nothing learnt about the destinations; a probe goes again now."""
        if probe:
            self.probe_running = False
            self._next_probe = self._clock()

    def succeeded(self) -> None:
        """A record reached every destination: every outage is over."""
        self.probe_running = False
        self._streaks.clear()
        ended, self._outages = list(self._outages.values()), {}
        if self._on_close is not None:
            for outage in ended:
                self._on_close(outage)

    def _schedule_probe(self) -> None:
        self._next_probe = self._clock() + self._backoff.next_delay()
