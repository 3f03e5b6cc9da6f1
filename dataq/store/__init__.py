"""The queue store: the only code in dataq that speaks Redis (with its Lua scripts in ``lua/``).

Key names come from :mod:`dataq.keys`; redis-py errors leave as dataq errors (:mod:`.connection`).
"""

from __future__ import annotations

from dataq.config import Settings
from dataq.store.admin import AdminOps
from dataq.store.base import NOTICE_WORK
from dataq.store.connection import connect
from dataq.store.lease import LeaseOps
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


class QueueStore(LifecycleOps, AdminOps, LeaseOps):
    """One queue in Redis: every operation the daemons, the actions and the CLI need."""

    @classmethod
    def open(cls, settings: Settings, url: str, queue: str) -> QueueStore:
        """A store for ``queue`` on ``url`` with the settings' TLS options, timeouts and event limits."""
        redis = settings.redis
        return cls.from_url(url, queue, events_max_len=settings.events.max_len, ca_file=redis.ca_file,
                            cert_file=redis.cert_file, key_file=redis.key_file, socket_timeout=redis.socket_timeout)

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
