"""The rates ring's shape, in one place for the Lua library that writes it (``lua/lib/rates.lua``, which gets
these values as its first lines: :func:`lua_constants`) and the store that reads it (:mod:`.rates`)."""

from __future__ import annotations

RATE_BUCKET_SECONDS = 10
"""Seconds one bucket of the ring counts."""
RATE_SLOTS = 360
"""Buckets the ring keeps: an hour."""
RATE_KINDS = ("pushed", "duplicate", "done", "failed")
"""What the ring counts: records pushed, pushes ignored as duplicates, records done, and failed attempts (a record
deactivated by its last failure included)."""


def lua_constants() -> str:
    """The ring's shape as the Lua library's locals."""
    kinds = ", ".join(f"'{kind}'" for kind in RATE_KINDS)
    return (f"local RATE_BUCKET_SECONDS, RATE_SLOTS = {RATE_BUCKET_SECONDS}, {RATE_SLOTS}\n"
            f"local RATE_KINDS = {{ {kinds} }}")
