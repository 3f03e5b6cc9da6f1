"""The windows of a pop daemon's destinations (:mod:`dataq.windows`): outside a destination's windows the daemon
claims nothing, so the queue's records wait in the active list, as in an outage, without counting as failures.

Every record runs every action of the queue, so one destination outside its windows holds up the queue. What
runs when a window closes goes on to its end; claiming starts again as the next window opens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dataq.logs import get_logger
from dataq.windows import Windows

CHECK_AT_LEAST = 30.0
"""Seconds between two looks at the clock while claiming waits for a window (the clock may be set meanwhile)."""

log = get_logger()


@dataclass(frozen=True, slots=True)
class Shut:
    """A destination outside its windows until ``opens``."""

    destination: str
    windows: Windows
    opens: float

    def public(self) -> dict[str, object]:
        return {"destination": self.destination, "windows": self.windows.describe(), "opens": round(self.opens, 3)}


class WindowGate:
    """The destinations with windows, and which of them were shut at the last look (logged as it changes);
    ``destinations`` says them as they are now (a reload may change them)."""

    def __init__(self, destinations: Callable[[], Sequence[tuple[str, Windows]]]) -> None:
        self.destinations = destinations
        self.shut: list[Shut] = []

    def look(self, now: float) -> list[Shut]:
        """The destinations shut at ``now``, the soonest to open first."""
        shut = sorted((Shut(name, windows, windows.opens(now)) for name, windows in self.destinations()
                       if not windows.open_at(now)), key=lambda item: item.opens)
        before = {item.destination for item in self.shut}
        after = {item.destination for item in shut}
        for item in shut:
            if item.destination not in before:
                log.info("outside a destination's windows: claiming nothing until it opens",
                         destination=item.destination, windows=item.windows.describe(), opens=round(item.opens, 3))
        for item in self.shut:
            if item.destination not in after:
                log.info("a destination's window opened: claiming again", destination=item.destination)
        self.shut = shut
        return shut

    def wait(self, now: float) -> float:
        """Seconds to wait before looking again while something is shut."""
        return max(0.05, min(CHECK_AT_LEAST, min(item.opens for item in self.shut) - now)) if self.shut else 0.0

    def public(self) -> list[dict[str, object]]:
        """For the heartbeat (``dataq-cli --why`` and ``--summary`` read it there)."""
        return [item.public() for item in self.shut]
