"""The queue store: the only code in dataq that speaks Redis (with its Lua scripts in ``dataq/lua``).

Key names come from :mod:`dataq.keys`; redis-py errors leave as dataq errors (:mod:`.connection`).
"""

from __future__ import annotations

from dataq.store.admin import AdminOps
from dataq.store.base import NOTICE_WORK
from dataq.store.connection import connect
from dataq.store.lifecycle import LifecycleOps
from dataq.store.types import (
    Claim,
    ClaimStatus,
    Event,
    FailOutcome,
    Flag,
    PushResult,
    QueueList,
    Reclaimed,
    RecordState,
    Summary,
    Worker,
)


class QueueStore(LifecycleOps, AdminOps):
    """One queue in Redis: every operation the daemons and the CLI need."""

    @classmethod
    def from_url(
        cls,
        url: str,
        queue: str,
        *,
        events_max_len: int | None = None,
        **connect_options: object,
    ) -> QueueStore:
        client = connect(url, **connect_options)  # type: ignore[arg-type]
        if events_max_len is None:
            return cls(client, queue)
        return cls(client, queue, events_max_len=events_max_len)


__all__ = [
    "NOTICE_WORK",
    "Claim",
    "ClaimStatus",
    "Event",
    "FailOutcome",
    "Flag",
    "PushResult",
    "QueueList",
    "QueueStore",
    "Reclaimed",
    "RecordState",
    "Summary",
    "Worker",
    "connect",
]
