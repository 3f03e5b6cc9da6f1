"""Where a queue remembers its done records: ids kept for ``remember_done`` seconds, at a few dozen bytes each.

A push of an id done within that time is answered ``Ignored`` (a file sent twice is not moved twice), and a
receipt query about it is answered ``done`` (:mod:`dataq.custody.receipts`). Both look an id up on the record path, so
the lookup is a fixed number of hash reads, never a scan, and expiry is Redis's own:

* Time is cut into *generations* of ``remember_done`` seconds. A record done in generation ``g`` is written to
  ``g``'s keys, which expire at the end of generation ``g + 1``; a lookup reads generations ``g`` and ``g - 1``.
  An id is therefore remembered for at least ``remember_done`` seconds and at most twice that.
* Each generation is split into 65,536 shards (``dq:{NAME}:done:<g>:<shard>``) by the id's digest, so each
  shard stays a small hash that Redis keeps as a compact listpack (up to ``hash-max-listpack-entries``, 128
  by default: 8 million ids per generation). A shard's field is the 16-byte md5 digest of the id (the id itself
  may be long; 128 bits make a collision as unlikely as one of md5 ids themselves), its value
  ``<done ms>,<wait ms>[,<end ms after done>]`` (:func:`parse_done`).

``remember_done = 0`` remembers nothing (the 2014 data-q's behaviour): a lookup then names no shard and no
digest (the scripts read nothing: a push costs what it cost before done ids were remembered), and
:attr:`Lookup.expires_at_ms` is 0, which tells the scripts not to write.

Measured by ``bench/cascade.py`` with ``MEMORY USAGE`` at 10^6 ids (see its results in ``bench/RESULTS.md``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from dataq.config.queue_settings import DEFAULT_REMEMBER_DONE
from dataq.keys import QueueKeys

__all__ = ["DEFAULT_REMEMBER_DONE", "Done", "Lookup", "Lost", "digest", "lookup", "parse_done", "parse_lost"]


def digest(record_id: str) -> bytes:
    """The 16 bytes a remembered id is kept as."""
    return hashlib.md5(record_id.encode("utf-8", "surrogateescape"), usedforsecurity=False).digest()


def generation(now: float, remember_done: float) -> int:
    return int(now // remember_done) if remember_done > 0 else 0


def expires_at_ms(generation_: int, remember_done: float) -> int:
    """When a generation's keys go: at the end of the generation after it (0: nothing is remembered)."""
    return math.ceil((generation_ + 2) * remember_done * 1000)


@dataclass(frozen=True, slots=True)
class Lookup:
    """What the scripts need to read or write the remembered ids of a batch: per id, its digest and the keys of
    its shard in the current and the previous generation (KEYS, in that order, two per id)."""

    digests: bytes
    """The ids' digests, 16 bytes each, in order (one argument: fixed width needs no separator)."""
    keys: list[str]
    expires_at_ms: int
    """When the current generation's keys expire; 0: nothing is remembered (``remember_done = 0``), so nothing
    may be written."""

    @property
    def current(self) -> list[str]:
        """The shards of the current generation alone, one per id (where done records are written)."""
        return self.keys[::2]


def generations(now: float, remember_done: float) -> tuple[int, int]:
    """The generations a lookup reads now: the current one and the one before (both 0 when nothing is
    remembered)."""
    current = generation(now, remember_done)
    return current, max(0, current - 1)


def digests_of(ids: Sequence[str]) -> list[bytes]:
    """:func:`digest` of each id, at 0.6 of its cost: the ids encoded in one call, not one each (a push daemon
    spent a quarter of its store calls' time on digests)."""
    if not ids:
        return []
    encoded = "\n".join(ids).encode("utf-8", "surrogateescape").split(b"\n")
    if len(encoded) != len(ids):
        raise ValueError("a record id holds a newline")
    md5 = hashlib.md5
    return [md5(item, usedforsecurity=False).digest() for item in encoded]


def lookup(keys: QueueKeys, ids: Sequence[str], now: float, remember_done: float) -> Lookup:
    if remember_done <= 0:
        return Lookup(b"", [], 0)
    current, previous = generations(now, remember_done)
    this, before = keys.done_prefix(current), keys.done_prefix(previous)
    digests = digests_of(ids)
    names = []
    for value in digests:
        # The shard is the digest's first two bytes, as the 4 hex digits that end its name (keys.done_prefix).
        shard = value[:2].hex()
        names += [this + shard, before + shard]
    return Lookup(b"".join(digests), names, expires_at_ms(current, remember_done))


@dataclass(frozen=True, slots=True)
class Done:
    """A remembered done record: when it was done here, when it was pushed here, and (for a record this site
    handed on) when the end of the chain had it, as its receipt said."""

    done_at: float
    pushed_at: float
    end_at: float | None

    @property
    def confirmed_at(self) -> float:
        """When the record was done end to end (here, for a site that hands nothing on)."""
        return self.end_at if self.end_at is not None else self.done_at


@dataclass(frozen=True, slots=True)
class Lost:
    """A record done here once, whose stored copy an audit found missing or damaged and marked lost at ``at``
    (its done state forgotten: :mod:`dataq.store.audits`)."""

    at: float
    why: str


def parse_lost(value: str) -> Lost:
    """Inverse of ``mark_lost.lua``'s ``<ms>,<why>``."""
    at, _, why = value.partition(",")
    return Lost(int(at) / 1000, why)


def parse_done(value: str) -> Done:
    """Inverse of the scripts' ``<done ms>,<wait ms>[,<end ms after done>]`` (integers: a listpack keeps them
    in a few bytes)."""
    parts = [int(part) for part in value.split(",")]
    done_ms, wait_ms = parts[0], parts[1]
    end = (done_ms + parts[2]) / 1000 if len(parts) > 2 else None
    return Done(done_ms / 1000, (done_ms - wait_ms) / 1000, end)
