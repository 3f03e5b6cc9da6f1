"""Custody across sites: records handed on and not yet confirmed by the end of the chain, and the receipts that
confirm them (the cascade's end-to-end custody; see ``docs/custody.md``).

A record ``network_move`` hands on to the next site enters this site's *custody* (:meth:`CustodyOps.keep`)
before it is acknowledged here; it leaves custody only when the next site answers ``done`` for it, which that
site says only once the end of the chain holds it (:meth:`CustodyOps.whereabouts` is what a site answers from).
What the sender does with each answer is one atomic step (:meth:`CustodyOps.apply_steps`, a :class:`Step`):
forget the record (done), keep it with the answer (pending), ask again later (no answer), or queue it here again
to be resent (unknown). The rest of custody is :mod:`dataq.custody`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dataq.record import Record
from dataq.store.base import NOTICE_WORK
from dataq.store.connection import translated
from dataq.store.custody_codes import Step, TrackedState, Whereabouts
from dataq.store.lifecycle import LifecycleOps
from dataq.store.remembered import Done, Lost, parse_done, parse_lost
from dataq.stored_value import decode_stored, encode_stored

RECEIPTS_KEPT = 10_000
"""Newest receipts whose end-to-end latency is kept (``--summary`` reads the last hour's from them)."""
INACTIVE_SEARCHED = 1000
"""Newest inactive records searched for an id a receipt query names (beyond them, a failure count tells)."""


@dataclass(frozen=True, slots=True)
class LastAnswer:
    """What the chain last said of a record in custody, field by field: where it is (``site``), in which
    ``state``, why (``error``), and what this site adds (``note``: other next sites not answering, resent)."""

    receipt: str
    """The kind of receipt heard (``pending``, ``unknown``, ``error``; ``note`` alone for an answer kept by a
    dataq before 0.2, whose words are kept as they were)."""
    site: str = ""
    state: str | None = None
    error: str | None = None
    note: str | None = None

    def describe(self) -> str:
        """One line for operators: ``pending at S: queued (E)``, ``unknown at S; T not answering``..."""
        if self.receipt == "pending":
            text = f"pending at {self.site}: {self.state}" + (f" ({self.error})" if self.error else "")
        elif self.receipt == "note":
            text = ""
        elif self.site:
            text = f"{self.receipt} at {self.site}" + (f": {self.error}" if self.error else "")
        else:
            text = f"{self.receipt}: {self.error}"
        return "; ".join(part for part in (text, self.note) if part)

    def encode(self) -> dict[str, str]:
        fields = {"k": self.receipt, "s": self.site, "st": self.state, "e": self.error, "n": self.note}
        return {key: value for key, value in fields.items() if value}

    @classmethod
    def decode(cls, value: object) -> LastAnswer:
        if not isinstance(value, dict):  # an entry kept by a dataq before 0.2: its words, as they were
            return cls("note", note=str(value))
        return cls(str(value.get("k", "")), str(value.get("s", "")), value.get("st"), value.get("e"), value.get("n"))


@dataclass(frozen=True, slots=True)
class CustodyEntry:
    """One record in custody: handed on to ``site`` at ``handed_at``, and what the chain last said of it."""

    record: Record
    site: str
    """The next site (``host:port``) that took it; ``""`` while it waits in the hand-on spool."""
    handed_at: float
    last: LastAnswer | None = None
    """What the chain last said of it (None: nothing yet)."""
    identity: tuple[int, ...] | None = None
    """The source file as it was sent (device, inode, size, times): it is deleted only if still that file."""
    resends: int = 0
    raw: str = ""
    """The entry as stored (what a step names, so that an entry kept again meanwhile is left alone)."""

    def encode(self) -> str:
        value: dict[str, Any] = {"r": encode_stored([(self.record, self.record.source or "")],
                                                    self.record.pushed_at or time.time())[0],
                                 "site": self.site, "at": round(self.handed_at * 1000), "n": self.resends}
        if self.last is not None:
            # The words under "a", as dataq 0.1 kept them (a push daemon of 0.1 on the same Redis, mid-upgrade,
            # answers receipts from them), and the fields under "la".
            value["a"] = self.last.describe()
            value["la"] = self.last.encode()
        if self.identity is not None:
            # A string: the scripts' JSON keeps 14 digits of a number, and nanosecond times have 19.
            value["f"] = ":".join(str(part) for part in self.identity)
        return json.dumps(value, separators=(",", ":"))

    @classmethod
    def decode(cls, record_id: str, raw: str) -> CustodyEntry:
        value = json.loads(raw)
        last, identity = value.get("la", value.get("a")), value.get("f")
        return cls(decode_stored(record_id, value["r"]), str(value["site"]), int(value["at"]) / 1000,
                   LastAnswer.decode(last) if last is not None else None,
                   tuple(int(part) for part in identity.split(":")) if identity else None,
                   int(value.get("n", 0)), raw)



@dataclass(frozen=True, slots=True)
class Tracked:
    """The answer for a record this site still holds in its queue."""

    state: TrackedState
    last_error: str | None
    pushed_at: float | None = None


Known = Tracked | CustodyEntry | Done | Lost | None
"""What this site knows of an id: in its queue, in its custody, remembered done, marked lost by an audit, or
nothing (None)."""


@dataclass(frozen=True, slots=True)
class CustodyStep:
    """What becomes of one custody entry once its next site was asked (see ``custody_step.lua``)."""

    step: Step
    entry: CustodyEntry
    end_at: float = 0.0
    """Done: when the end of the chain had it."""
    replacement: CustodyEntry | None = None
    """Pending, resend: the entry kept instead."""
    ask_at: float = 0.0
    """Pending, no answer, resend: when to ask again."""


RECEIPT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0, 604800.0)
"""End-to-end latency of receipts, seconds: from a chain of idle sites (seconds) to a week."""


def receipt_bucket(seconds: float) -> str:
    """The counters field that counts a receipt of ``seconds`` (its histogram bucket, ``le``)."""
    bound = next((bound for bound in RECEIPT_BUCKETS if seconds <= bound), None)
    return f"receipt_le:{bound:g}" if bound is not None else "receipt_le:+Inf"


class CustodyOps(LifecycleOps):
    @translated
    async def keep(self, entries: Sequence[CustodyEntry], first_ask: float, now: float | None = None) -> int:
        """Put records in custody (or keep them there, handed on anew); the number in custody after."""
        now = time.time() if now is None else now
        args: list[Any] = [round(now * 1000), round(first_ask * 1000),
                           "\n".join(entry.record.id for entry in entries),
                           "\n".join(entry.encode() for entry in entries)]
        return int(await self._script("custody_keep", list(self.keys.custody_keys()), args, replicated=True))

    @translated
    async def custody_due(self, limit: int, now: float | None = None) -> list[CustodyEntry]:
        """Up to ``limit`` records in custody whose next site is due to be asked, the longest due first."""
        now = time.time() if now is None else now
        k = self.keys
        ids: list[str] = await self.r.zrangebyscore(k.custody_due, "-inf", round(now * 1000), start=0, num=limit)
        return await self._entries(ids)

    @translated
    async def custody(self, ids: Sequence[str]) -> dict[str, CustodyEntry]:
        """The custody entries of those ``ids`` that are in custody."""
        return {entry.record.id: entry for entry in await self._entries(ids)}

    @translated
    async def custody_count(self) -> int:
        """Records in custody."""
        return int(await self.r.hlen(self.keys.custody))

    @translated
    async def oldest_in_custody(self, limit: int) -> list[CustodyEntry]:
        """The ``limit`` records longest in custody, the oldest first."""
        return await self._entries(await self.r.zrange(self.keys.custody_since, 0, limit - 1))

    async def _entries(self, ids: Sequence[str]) -> list[CustodyEntry]:
        if not ids:
            return []
        values = await self.r.hmget(self.keys.custody, list(ids))
        return [CustodyEntry.decode(record_id, value) for record_id, value in zip(ids, values, strict=True)
                if value is not None]

    @translated
    async def apply_steps(self, steps: Sequence[CustodyStep], resend_wait: float,
                          now: float | None = None) -> list[bool]:
        """Take the steps decided on what the next sites answered; per step True, or False when the entry changed
        meanwhile (kept again) and was left alone. ``resend_wait``: seconds before a resent record that is never
        handed on again is asked about again."""
        if not steps:
            return []
        now = time.time() if now is None else now
        k = self.keys
        remembered = self._remembered([step.entry.record.id for step in steps], now)
        args: list[Any] = [round(now * 1000), self.events_max_len, RECEIPTS_KEPT, k.work, NOTICE_WORK,
                           self.pubsub_mode, remembered.expires_at_ms, remembered.digests, self._named]
        for op in steps:
            args += [op.step.value, op.entry.record.id, op.entry.raw]
            if op.step is Step.DONE:
                latency = op.end_at - (op.entry.record.pushed_at or op.end_at)
                args += [round(op.end_at * 1000), receipt_bucket(latency)]
            elif op.step is Step.ASK_LATER:
                args += ["", round(op.ask_at * 1000)]
            else:
                assert op.replacement is not None
                ask_at = op.ask_at if op.step is Step.PENDING else now + resend_wait
                args += [op.replacement.encode(), round(ask_at * 1000)]
        keys = [*k.custody_keys(), k.records, k.counters, k.events, k.receipts, *remembered.keys,
                *self._active_lists]
        status = await self._script("custody_step", keys, args, replicated=True)
        return [ch == "1" for ch in status]

    @translated
    async def whereabouts(self, ids: Sequence[str], max_errors: int) -> list[Known]:
        """What this site knows of each id (one round trip, reads only): what a receipt query is answered from."""
        if not ids:
            return []
        k = self.keys
        remembered = self._remembered(ids)
        keys = [k.records, k.delayed, k.inactive, k.errors, k.lasterror, k.custody, k.lost, *remembered.keys]
        replies = await self._script("receipts", keys, [max_errors, "\n".join(ids), remembered.digests,
                                                        INACTIVE_SEARCHED])
        known: list[Known] = []
        for record_id, reply in zip(ids, replies, strict=True):
            kind, _, rest = reply.partition("\0")
            if kind == Whereabouts.TRACKED:
                state, pushed, error = rest.split("\0", 2)
                known.append(Tracked(TrackedState(state), error or None,
                                     int(pushed) / 1_000_000 if pushed else None))
            elif kind == Whereabouts.IN_CUSTODY:
                known.append(CustodyEntry.decode(record_id, rest))
            elif kind == Whereabouts.DONE:
                known.append(parse_done(rest))
            elif kind == Whereabouts.LOST:
                known.append(parse_lost(rest))
            else:
                known.append(None)
        return known

    @translated
    async def receipt_latencies(self, since: float) -> list[float]:
        """End-to-end latencies (seconds) of the receipts taken since ``since`` (of the newest kept)."""
        values: list[str] = await self.r.lrange(self.keys.receipts, 0, -1)
        latencies = []
        for value in values:
            at, _, latency = value.partition(",")
            if int(at) / 1000 < since:
                break  # newest first
            latencies.append(int(latency) / 1000)
        return latencies
