"""How fast records move, read from the rates ring the scripts keep (``lua/lib/rates.lua``): counts per
10-second bucket over the last hour, read with two short commands (``TIME``, one ``HMGET``) whatever the
traffic.

The ring replaces counting the event stream: with 100,000 records done in a minute, the stream took dozens of
``XREAD`` calls of several milliseconds each, during which Redis served no daemon.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from dataq.store.base import StoreBase
from dataq.store.connection import translated
from dataq.store.rate_ring import (
    COUNTS,
    DAY_BUCKET_SECONDS,
    DAY_PREFIX,
    DAY_SLOTS,
    LEVELS,
    RATE_BUCKET_SECONDS,
    RATE_KINDS,
    RATE_SLOTS,
)

HISTORY_SECONDS = RATE_BUCKET_SECONDS * RATE_SLOTS


@dataclass(frozen=True, slots=True)
class RateBucket:
    start: float
    """Server time (s) at which the bucket began; it ends :data:`RATE_BUCKET_SECONDS` later."""
    counts: Mapping[str, int]
    """Per kind of :data:`COUNTS`."""
    levels: Mapping[str, int | None] = field(default_factory=dict)
    """Per kind of :data:`LEVELS`: the last sample within the bucket (None: none was taken)."""


@dataclass(frozen=True, slots=True)
class RateHistory:
    """The ring's buckets over a span ending now, oldest first; every bucket of the span is there, empty or not."""

    now: float
    """The server's time when the ring was read."""
    since: float
    """Server time from which the ring has counted everything; 0 when it has since the queue began."""
    buckets: tuple[RateBucket, ...]
    bucket_seconds: float = RATE_BUCKET_SECONDS
    """Seconds each bucket counts (the day's ring: :data:`DAY_BUCKET_SECONDS`)."""

    def totals(self, seconds: float) -> tuple[dict[str, int], float, bool]:
        """Counts over the buckets that cover the last ``seconds`` (the current one as far as it has run), the
        seconds they span, and whether the ring counted all of that span."""
        first = self.now - seconds + self.bucket_seconds
        counts = dict.fromkeys(COUNTS, 0)
        start = self.now
        for bucket in self.buckets:
            if bucket.start + self.bucket_seconds > first:
                start = min(start, bucket.start)
                for kind, n in bucket.counts.items():
                    counts[kind] += n
        return counts, self.now - max(start, self.since), self.since <= start


    def since_busy(self, kind: str, seconds: float) -> tuple[int, float]:
        """The count of ``kind`` over the last ``seconds`` from the first bucket that counted any, and the seconds
        that span: a backlog that came to an idle queue is not reckoned at the rate of the idle minutes before it.
        That first bucket began before the work did (by up to a bucket), so once a whole bucket has run after it,
        it is left out, if any was counted after it. (0, 0.0) when nothing was counted."""
        first = self.now - seconds + self.bucket_seconds
        span = [bucket for bucket in self.buckets if bucket.start + self.bucket_seconds > first]
        busy = next((index for index, bucket in enumerate(span) if bucket.counts.get(kind)), None)
        if busy is None:
            return 0, 0.0
        # Left out when a whole bucket has run after it (the last one is the current, partial one), unless nothing
        # was counted after it (a burst, then quiet: the burst is the rate there is).
        if busy + 1 < len(span) - 1 and any(bucket.counts.get(kind) for bucket in span[busy + 1:]):
            busy += 1
        used = span[busy:]
        return sum(bucket.counts.get(kind, 0) for bucket in used), self.now - max(used[0].start, self.since)


class RateOps(StoreBase):
    @translated
    async def rate_history(self, seconds: float = HISTORY_SECONDS, activity: str | None = None) -> RateHistory:
        """The buckets of the last ``seconds`` (at most an hour), the current, partial one included; with
        ``activity``, of that activity's ring, which counts its done records only."""
        ring = self.keys.rates if activity is None else self.keys.rates_of(activity)
        return await self._read_ring(ring, seconds, "", RATE_BUCKET_SECONDS, RATE_SLOTS)

    @translated
    async def day_history(self, activity: str | None = None) -> RateHistory:
        """The day's ring: 5-minute buckets over the last day, the current one included (one ``HMGET`` of 1,700
        fields, as the hour's)."""
        ring = self.keys.rates if activity is None else self.keys.rates_of(activity)
        return await self._read_ring(ring, DAY_BUCKET_SECONDS * DAY_SLOTS, DAY_PREFIX, DAY_BUCKET_SECONDS,
                                     DAY_SLOTS)

    async def _read_ring(self, ring: str, seconds: float, prefix: str, bucket_seconds: int,
                         slots: int) -> RateHistory:
        now = await self._server_time()
        current = int(now // bucket_seconds)
        count = min(slots, max(1, math.ceil(seconds / bucket_seconds)))
        buckets = range(current - count + 1, current + 1)
        fields = ["since"]
        for bucket in buckets:
            slot = bucket % slots
            fields += [f"{prefix}t:{slot}", *(f"{prefix}{kind}:{slot}" for kind in RATE_KINDS)]
        values = await self.r.hmget(ring, fields)
        # No 'since': nothing was ever counted, so no bucket misses anything.
        since = float(values[0]) if values[0] is not None else 0.0
        found, stride = [], 1 + len(RATE_KINDS)
        for index, bucket in enumerate(buckets):
            stamp, *kinds = values[1 + index * stride : 1 + (index + 1) * stride]
            # A slot that still holds an older bucket (a ring's length ago) counts nothing of this one.
            fresh = stamp is not None and int(stamp) == bucket
            read = {kind: int(n) for kind, n in zip(RATE_KINDS, kinds, strict=True) if fresh and n is not None}
            counts = {kind: read.get(kind, 0) for kind in COUNTS}
            levels = {kind: read.get(kind) for kind in LEVELS}
            found.append(RateBucket(float(bucket * bucket_seconds), counts, levels))
        return RateHistory(now, since, tuple(found), bucket_seconds)

    @translated
    async def note_backlog_age(self, seconds: float, activity: str | None = None) -> None:
        """Note in the rates ring (with ``activity``, that activity's) how long the next record to run has waited
        (0: none waits), for the console's plot of the backlog's age: the last note of a bucket stands for it."""
        ring = self.keys.rates if activity is None else self.keys.rates_of(activity)
        await self._script("sample_age", [ring], [round(max(0.0, seconds))])

    async def _server_time(self) -> float:
        seconds, microseconds = await self.r.time()
        return float(seconds) + float(microseconds) / 1e6
