"""Capped exponential backoff with full jitter: how every retry loop of dataq waits."""

from __future__ import annotations

import asyncio
import contextlib
import random

BACKOFF_INITIAL = 0.05
"""First wait after a failure, in seconds: short, since most Redis hiccups are restarts."""
BACKOFF_CAP = 5.0
"""Longest wait between retries: an operator fixing Redis should not wait long for dataq to notice."""
HOT_RETRY_CAP = 0.5
"""Longest wait between retries of the loops records wait on (the push daemon's commits, the pop daemon's claims
and settling): a fail-over is over within seconds, and an attempt costs little (a refused connection, or a
question to the sentinels)."""


MAX_DOUBLINGS = 60
"""Past this many failures the delay is the cap anyway: counting on would overflow a float (a loop that retries
for ever, as a spooled feeder does, fails more than a thousand times in a day's outage)."""


class Backoff:
    """Capped exponential backoff with full jitter (so a fleet does not retry in lock-step)."""

    def __init__(self, initial: float = BACKOFF_INITIAL, cap: float = BACKOFF_CAP) -> None:
        self.initial, self.cap = initial, cap
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.initial * 2.0**min(self.attempt, MAX_DOUBLINGS))
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    async def wait(self, stop: asyncio.Event | None = None) -> None:
        """Sleep the next delay, or less if ``stop`` is set meanwhile."""
        delay = self.next_delay()
        if stop is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await stop.wait()

    def reset(self) -> None:
        self.attempt = 0
