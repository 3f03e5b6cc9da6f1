"""The rates ring's shape, in one place for the Lua library that writes it (``lua/lib/rates.lua``, which gets
these values as its first lines: :func:`lua_constants`) and the store that reads it (:mod:`.rates`)."""

from __future__ import annotations

RATE_BUCKET_SECONDS = 10
"""Seconds one bucket of the ring counts."""
RATE_SLOTS = 360
"""Buckets the ring keeps: an hour."""
RATE_KINDS = ("pushed", "duplicate", "done", "failed", "done_bytes", "backlog_age")
"""What the ring counts: records pushed, pushes ignored as duplicates, records done, failed attempts (a record
deactivated by its last failure included), and the bytes of the records done (their sizes: counted in the ring
only, never in the queue's totals); and one level, not a count: ``backlog_age``, the seconds the next record to
run had waited when a pop daemon last looked within the bucket (absent: none looked)."""
LEVELS = ("backlog_age",)
"""The kinds that are samples of a level, not counts: summing them means nothing."""
COUNTS = tuple(kind for kind in RATE_KINDS if kind not in LEVELS)
"""The kinds that are counts, which a span's totals add up."""
DAY_BUCKET_SECONDS = 300
"""Seconds one bucket of the day's ring counts, kept in the same hash as the hour's (fields prefixed ``d:``)."""
DAY_SLOTS = 288
"""Buckets the day's ring keeps: a day."""
DAY_PREFIX = "d:"


def lua_constants() -> str:
    """The ring's shape as the Lua library's locals."""
    kinds = ", ".join(f"'{kind}'" for kind in RATE_KINDS)
    return (f"local RATE_BUCKET_SECONDS, RATE_SLOTS = {RATE_BUCKET_SECONDS}, {RATE_SLOTS}\n"
            f"local DAY_BUCKET_SECONDS, DAY_SLOTS, DAY_PREFIX = {DAY_BUCKET_SECONDS}, {DAY_SLOTS}, '{DAY_PREFIX}'\n"
            f"local RATE_KINDS = {{ {kinds} }}")
