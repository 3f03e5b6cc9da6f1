"""What audits keep in the queue's Redis: records marked lost by a repair, and the last audit of each directory or
storing root (for metrics, ``--summary`` and the web console). The audit itself is :mod:`dataq.audit`."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from dataq.store.connection import translated
from dataq.store.custody import CustodyOps


class AuditOps(CustodyOps):
    @translated
    async def mark_lost(self, lost: Sequence[tuple[str, str]], now: float | None = None) -> list[bool]:
        """Forget that records were done here and mark them lost, per (id, why); per id True, or False for a
        record tracked here again (being stored anew: left alone)."""
        if not lost:
            return []
        now = time.time() if now is None else now
        k = self.keys
        remembered = self._remembered([record_id for record_id, _ in lost], now)
        args: list[Any] = [round(now * 1000), self.events_max_len, remembered.digests]
        for record_id, why in lost:
            args += [record_id, " ".join(why.split())]
        status = await self._script("mark_lost", [k.records, k.lost, k.events, k.counters, *remembered.keys], args,
                                    replicated=True)
        return [ch == "1" for ch in status]

    @translated
    async def save_audit(self, target: str, result: dict[str, Any]) -> None:
        """Keep the result of the last audit of ``target`` (a directory or a storing root)."""
        await self.r.hset(self.keys.audits, target, json.dumps(result, separators=(",", ":")))

    @translated
    async def audits(self) -> dict[str, dict[str, Any]]:
        """The last audit of each directory and storing root, by target."""
        values: dict[str, str] = await self.r.hgetall(self.keys.audits)
        return {target: json.loads(value) for target, value in values.items()}
