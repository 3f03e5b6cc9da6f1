"""How many records ``network_move`` sends in one rsync call, sized to the link to its destination.

Every rsync call pays a fixed cost before and after its data: the connection, the daemon's greeting and module
exchange, the file list and the closing handshakes, about seven round trips (measured over a 75 ms link: 1.05 s
for a batch whose 2 MB then took 0.16 s). On a LAN that is a few milliseconds and a batch of 100 small files
amortises it; over a long link it is most of every call, and the link idles. FTS3's optimizer adjusts the
transfers per link from what it measures, step by step, and logs each decision with its reason; this does the same
for the batch size:

* each batch sent is an observation: its seconds and bytes, kept with the last :data:`WINDOW` of its batch size;
* the seconds of a call are fitted as ``overhead + bytes / rate`` (least squares) over the last :data:`HORIZON`
  observations; while they are of one size only, with bytes too alike to tell the two apart, the next batches
  are half as large (or, at ``least``, twice, while the shortest call, an upper bound of the overhead, says it
  may be worth it), so that the fit has two sizes to go by;
* after :data:`SETTLE` observations of batches of the size in use, if the overhead is more than
  :data:`GROW_ABOVE` of the median call, batches grow (up to ``most``): to the size whose calls would spend
  :data:`TARGET_SHARE` of their time on the overhead, as the fitted rate says, :data:`MOST_GROWTH` times larger at
  most in one step (twice as large while the rate is not known); if it is less than :data:`SHRINK_BELOW`, they
  halve (down to ``least``, the option ``batch_size``): smaller batches reach the next site sooner.

A link's round trip, when it is known before the first call (the greeting of an rsync daemon:
:mod:`.round_trip`), spares the first round of small calls: when its calls' round trips alone (:data:`CALL_ROUND_TRIPS`
of them) would take :data:`FAR` seconds or more, batches start at ``most``. They stay there while those round trips,
a lower bound of the overhead, are more than :data:`GROW_ABOVE` of the median call (a smaller batch would only
spend more of its time on them): the batches' bytes need not differ for the fit to know that much. A greeting
slower than the shortest call since (an upper bound of the overhead) is of a link that has changed, and is
forgotten, as is one :data:`HORIZON` calls old (a greeting slowed by chance must not keep the batches at the most
for good). Batches cut by their bytes (``most_bytes``) before they reach the size in use bring it down to what
the bytes hold.

Observations are kept by the size of their batch (rounded to a power of two): batches cut before a step, and
batches cut early (the first of a burst, a trickle's), are told apart from those of the size in use.

A call that failed (the destination unreachable, a timeout) is not an observation of the link's speed: it is left
out, and the batch size is halved, as FTS3 steps down on failures.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from dataq.logs import get_logger

from .round_trip import round_trip

WINDOW = 8
"""Observations kept per batch size."""
HORIZON = 32
"""The fit looks at the last this many observations of every size: a link that changed is learned anew (at the
cost, on a link where batches stay small, of a step up to probe it about once per this many calls)."""
SETTLE = 2
"""Observations of batches of the size in use before the next step (a step's effect must show first)."""
TARGET_SHARE = 0.2
"""Share of a call's time on its fixed cost that a step up aims at."""
MOST_GROWTH = 10
"""How many times larger batches grow in one step at most."""
GROW_ABOVE = 0.3
"""Share of a call's time spent on its fixed cost above which batches grow."""
SHRINK_BELOW = 0.05
"""Share below which they shrink back."""
CALL_ROUND_TRIPS = 7
"""Round trips an rsync call to a daemon pays besides its data (connect, greeting, module, file list, closing)."""
FAR = 0.1
"""Seconds of a call's round trips from which batches start at the most: a link of about 15 ms round trips, over
which a first call of 100 small files would spend most of its time on them."""
DISTINCT_BYTES = 1.5
"""Ratio of the largest batch's bytes to the smallest's from which the fit can tell overhead from rate."""

log = get_logger()


@dataclass(frozen=True, slots=True)
class Decision:
    """One step of the tuner, as it is logged and shown (``dataq-cli --workers --json``)."""

    batch_size: int
    reason: str
    at: float
    """Unix time."""


@dataclass(frozen=True, slots=True)
class Fit:
    """What the last observations say of the link: each call's fixed seconds, and bytes per second."""

    overhead: float
    rate: float | None
    """None: the batches' bytes were too alike to tell (the overhead is then an upper bound)."""
    median_call: float

    @property
    def share(self) -> float:
        return self.overhead / self.median_call if self.median_call > 0 else 0.0


def fit(calls: list[tuple[float, int]], now: Iterable[tuple[float, int]]) -> Fit:
    """The fit of ``(seconds, bytes)`` calls (at least one), as it applies to the calls ``now`` (those of the
    batch size in use)."""
    seconds = [call[0] for call in calls]
    sizes = [call[1] for call in calls]
    median = statistics.median(call[0] for call in now)
    shortest = min(call[0] for call in now)
    if len(calls) >= 3 and min(sizes) > 0 and max(sizes) / min(sizes) >= DISTINCT_BYTES:
        slope, intercept = statistics.linear_regression(sizes, seconds)
        if slope > 0:
            return Fit(min(max(intercept, 0.0), shortest), 1 / slope, median)
    return Fit(shortest, None, median)


def _bucket(records: int) -> int:
    """The power of two nearest ``records`` (batches of about one size)."""
    return 1 << max(0, round(math.log2(max(records, 1))))


class TransferTuner:
    """The batch size of one destination's rsync calls (see the module's docstring)."""

    def __init__(self, destination: str, *, least: int, most: int, enabled: bool = True,
                 most_bytes: int | None = None) -> None:
        """``most_bytes``: the bytes at which a batch is cut anyway (``batch_bytes``): batches never grow past
        the records that fit in it, which they could not fill."""
        self.destination, self.least, self.most, self.enabled = destination, least, max(least, most), enabled
        self.most_bytes = most_bytes
        self.batch_size = least
        self._calls: dict[int, deque[tuple[int, float, int]]] = {}
        """Observations by batch size: their number, seconds and bytes."""
        self._count = 0
        self._bytes_per_record = 0
        """Of the last batch sent with bytes (0: none yet): how many records a batch holds by ``most_bytes``."""
        self._since_step = 0
        self.last: Decision | None = None
        self.last_fit: Fit | None = None
        self.round_trip: float | None = None
        """The link's round trip as a greeting measured it (None: not measured, or forgotten)."""
        self._greeted_at = 0
        """The observations made before the greeting's."""

    def greeted(self, greeting: float | None) -> Decision | None:
        """What the destination's greeting (:func:`~dataq.actions.round_trip.greeting_seconds`: seconds, None: no
        greeting) says before any call: over a far link, batches start at the most. The step taken, if any."""
        if greeting is None:
            return None
        self.round_trip, self._greeted_at = round_trip(greeting), self._count
        calls_round_trips = CALL_ROUND_TRIPS * self.round_trip
        if not self.enabled or calls_round_trips < FAR or self.batch_size >= self.most:
            return None
        return self._step(self.most, f"the destination greeted in {greeting * 1000:.0f} ms: each call's round trips "
                                     f"take about {calls_round_trips:.2g} s, so batches start at the most")

    def _far(self, found: Fit) -> bool:
        """Whether the greeting's round trips alone are more than :data:`GROW_ABOVE` of the median call (forgotten
        when they are more than the shortest call, the link changed, or :data:`HORIZON` calls ago: a greeting
        slowed by chance must not keep the batches at the most for good)."""
        if self.round_trip is None:
            return False
        least_overhead = CALL_ROUND_TRIPS * self.round_trip
        if least_overhead > found.overhead or self._count - self._greeted_at > HORIZON:
            self.round_trip = None
            return False
        return least_overhead > GROW_ABOVE * found.median_call

    def observe(self, seconds: float, size: int, records: int, *, failed: bool = False) -> Decision | None:
        """One batch of ``records`` sent: its seconds and bytes (``failed``: the call did not reach the destination
        or timed out). The step taken, if any."""
        if not self.enabled:
            return None
        if not failed and size > 0 and records > 0:
            self._bytes_per_record = size // records
        if failed:
            if self.batch_size > self.least:
                return self._step(max(self.least, self.batch_size // 2),
                                  "a call to the destination failed: smaller batches until calls go through")
            return None
        if size <= 0 or records <= 0:
            return None  # empty files: their calls say nothing of the link's rate
        self._count += 1
        bucket = _bucket(records)
        self._calls.setdefault(bucket, deque(maxlen=WINDOW)).append((self._count, seconds, size))
        held = self._held()
        if held < self.batch_size:
            # Batches cut by their bytes are never of the size in use, which would then never change.
            return self._step(held, f"batches are cut by their bytes at about {held} records of "
                                    f"{self._bytes_per_record} bytes")
        if bucket != _bucket(self.batch_size):
            return None
        self._since_step += 1
        if self._since_step < SETTLE:
            return None
        recent = self._count - HORIZON
        found = self.last_fit = fit(
            [(seconds, size) for calls in self._calls.values() for count, seconds, size in calls if count > recent],
            [(seconds, size) for _, seconds, size in self._calls[bucket]][-SETTLE:])
        share = found.share
        measured = (f"each call spends {found.overhead:.3g} s of its {found.median_call:.3g} s "
                    f"({share:.0%}) on round trips and set-up")
        if found.rate is None:
            # One size of batch seen lately: the fit cannot tell the overhead from the rate. A step toward the
            # least (up from it) gives it a second size; the fit then says where to go.
            if self.batch_size > self.least and not self._far(found):
                return self._step(max(self.least, self.batch_size // 2), "batches of one size only lately: "
                                                                          "a smaller one to measure the link")
            if share > GROW_ABOVE and self.batch_size < self.most:
                return self._step(min(self.most, self.batch_size * 2), f"{measured} at most: larger batches")
            return None
        if share > GROW_ABOVE and self.batch_size < self.most:
            # The batch whose transfer takes (1 - TARGET_SHARE) / TARGET_SHARE times the overhead.
            per_record = size / max(records, 1) / found.rate
            grown = round(found.overhead * (1 - TARGET_SHARE) / TARGET_SHARE / max(per_record, 1e-9))
            grown = max(self.batch_size + 1, min(grown, self.batch_size * MOST_GROWTH))
            return self._step(min(self.most, grown), f"{measured}: larger batches")
        if share < SHRINK_BELOW and self.batch_size > self.least:
            return self._step(max(self.least, self.batch_size // 2),
                              f"{measured}: smaller batches reach the next site sooner")
        return None

    def _held(self) -> int:
        """Records a batch holds before its bytes cut it, as the last batch's files say (``most`` when not known),
        ``least`` at least."""
        if self.most_bytes is None or self._bytes_per_record <= 0:
            return self.most
        return max(self.least, self.most_bytes // self._bytes_per_record)

    def _step(self, batch_size: int, reason: str) -> Decision | None:
        if batch_size > self.batch_size:
            batch_size = min(batch_size, self._held())
            if batch_size <= self.batch_size:
                return None  # batches are cut by their bytes before they could hold more
        before, self.batch_size = self.batch_size, batch_size
        self._since_step = 0
        decision = self.last = Decision(batch_size, reason, time.time())
        fitted = self.last_fit
        log.info("batch size changed", destination=self.destination, batch_size=batch_size, was=before,
                 reason=reason, rate_mb_s=round(fitted.rate / 1e6, 1) if fitted and fitted.rate else None)
        return decision

    def status(self) -> dict[str, object]:
        """For the heartbeat: the batch size now, its bounds, the last fit and decision."""
        found, last = self.last_fit, self.last
        return {
            "batch_size": self.batch_size, "least": self.least, "most": self.most,
            "overhead_seconds": round(found.overhead, 4) if found else None,
            "round_trip_seconds": round(self.round_trip, 4) if self.round_trip is not None else None,
            "rate_bytes_per_second": round(found.rate) if found and found.rate else None,
            "decision": last.reason if last else None, "decided_at": last.at if last else None,
        }
