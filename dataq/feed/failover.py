"""Which push daemon a feeder talks to next: a small state machine, with no I/O and no clock of its own.

A feeder has one or more push daemons (the seed's ``highAvailabilitySites``), tried in order. The machine is in
one of four phases:

- **connected** to one of them, sending and reading replies;
- **trying next**: the last one failed (refused, silent, dropped the connection), so the next is tried at once;
- **waiting**: every one failed in this round; the next round starts from the first after a backoff, and once
  the failures have lasted ``retry_for`` seconds at the end of a round the feeder gives up (FeedError, naming
  what each one answered);
- **failing back**: after ``failback_after`` seconds on a later one (which it *leaves*: takes nothing new and
  finishes what it has in flight), the first is tried again; if it fails, the later one is taken back at once.

A connection that made progress (got replies) before it was lost is a fresh failure: the failing time and the
backoff start again. The feeder (:mod:`.client`) does the I/O and tells the machine what happened, with the time.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from dataq.feed.link import FeedError
from dataq.runtime.backoff import Backoff


class Phase(enum.Enum):
    CONNECTED = "connected"
    TRYING_NEXT = "trying next"
    WAITING = "waiting"
    FAILING_BACK = "failing back"


@dataclass(frozen=True, slots=True)
class Step:
    """What the feeder does next: connect to ``target`` (an index into the targets) after ``delay`` seconds;
    ``failure``: whether the failure that led here is one to report (an outage), not a failed try at going back."""

    target: int
    delay: float = 0.0
    failure: bool = True


class Failover:
    """The feeder's choice of push daemon (see the module's docstring); ``names`` say ``host:port`` for errors."""

    def __init__(self, names: Sequence[str], *, retry_for: float, failback_after: float, backoff: Backoff) -> None:
        if not names:
            raise ValueError("a feeder needs at least one push daemon")
        self.names = list(names)
        self.retry_for, self.failback_after, self.backoff = retry_for, failback_after, backoff
        self.phase = Phase.TRYING_NEXT
        self.current = 0
        self.leaving = False
        """Connected to a later one past ``failback_after``: take nothing new, finish what is in flight, leave."""
        self._back_to: int | None = None
        """While failing back: the later one to return to if the first fails."""
        self._returning: int | None = None
        """Connected to the first while failing back: where to return if it fails before any progress."""
        self._failing_since: float | None = None
        self._leave_at: float | None = None
        self._errors: dict[int, str] = {}

    # --- transitions --------------------------------------------------------------------------------------

    def connected(self, now: float) -> None:
        """A connection to ``current`` was made."""
        self.phase = Phase.CONNECTED
        self._returning, self._back_to = self._back_to, None
        self._leave_at = now + self.failback_after if self.current else None
        self.leaving = False

    def connect_failed(self, now: float, error: str) -> Step:
        """No connection to ``current`` (refused, timed out, TLS refused by a later one)."""
        if self.phase is Phase.FAILING_BACK and self._back_to is not None:
            return self._go_back(self._back_to)
        return self._failed(now, error)

    def lost(self, now: float, error: str, *, progressed: bool) -> Step:
        """The connection to ``current`` ended before everything was answered; ``progressed``: replies came."""
        if self._returning is not None and not progressed:  # the first is not well yet
            return self._go_back(self._returning)
        if progressed:  # a fresh failure
            self._failing_since = None
            self.backoff.reset()
        return self._failed(now, error)

    def ended(self) -> Step | None:
        """The connection ended with nothing left to answer: None when the feed is done, else where to go (back
        to the first, after leaving a later one)."""
        self._failing_since, self._returning = None, None
        self.backoff.reset()
        if not self.leaving:
            return None
        self._back_to, self.current = self.current, 0
        self.phase = Phase.FAILING_BACK
        return Step(0, failure=False)

    def leave_due(self, now: float) -> bool:
        """Whether to leave a later push daemon now (asked while sending): past ``failback_after`` on it."""
        if not self.leaving and self._leave_at is not None and now >= self._leave_at:
            self.leaving = True
        return self.leaving

    def leave_in(self, now: float) -> float | None:
        """Seconds until a later push daemon is to be left (None: connected to the first, never)."""
        return None if self._leave_at is None else max(0.0, self._leave_at - now)

    # ------------------------------------------------------------------------------------------------------

    def _go_back(self, target: int) -> Step:
        self._back_to = self._returning = None
        self.current = target
        self.phase = Phase.TRYING_NEXT
        return Step(target, failure=False)

    def _failed(self, now: float, error: str) -> Step:
        self._back_to = self._returning = None
        self._errors[self.current] = error
        if self._failing_since is None:
            self._failing_since = now
        self.current = (self.current + 1) % len(self.names)
        if self.current:
            self.phase = Phase.TRYING_NEXT
            return Step(self.current)
        # Every one failed this round.
        if now - self._failing_since >= self.retry_for:
            raise FeedError(self._give_up_message())
        self.phase = Phase.WAITING
        return Step(0, delay=self.backoff.next_delay())

    def _give_up_message(self) -> str:
        if len(self.names) == 1:
            return f"cannot reach the push daemon at {self.names[0]} ({self._errors.get(0, '?')})"
        tried = "; ".join(f"{name}: {self._errors.get(index, 'not tried')}" for index, name in enumerate(self.names))
        return f"cannot reach any push daemon ({tried})"
