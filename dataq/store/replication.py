"""Writes acknowledged by replicas: ``min_replicas`` confirm a write before it counts.

With ``min_replicas`` > 0, a write that must survive a fail-over (a push batch, an ack or
fail, a range move) is sent with ``WAIT min_replicas timeout`` at once on one connection: WAIT counts the
replicas that hold the writes *of that connection*, so the write and its WAIT must share it. The script's reply
is read before WAIT's, so a writer learns that the master has its write while the replicas are still at it (the
push daemon then sends its next batch). Both go at once on one of the store's lane connections
(:mod:`.lane`): redis-py's pipeline hands back nothing before the last reply.
When WAIT falls short the write has happened on the master but is not safe: :class:`~dataq.errors.NotReplicated`
(a StoreUnavailable) lets the caller retry. A retried script may find its work already done and write nothing;
its WAIT would then count an empty connection as replicated, so the next replicated call after a shortfall adds
a one-field write of its own (``replica_retries`` in the queue's counters): any later write on the master
carries every earlier one in the replication stream, so its WAIT covers the unconfirmed one too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rexc

from dataq.errors import NotReplicated
from dataq.store.lane import Lane, Script
from dataq.store.sentinel import follow_elected_master

REPLICA_RETRIES_FIELD = "replica_retries"
"""Counters field bumped by the write that re-confirms an earlier unconfirmed one (see the module docstring)."""


@dataclass(slots=True)
class Replication:
    """Makes chosen writes wait for ``min_replicas`` replicas (none when 0)."""

    min_replicas: int = 0
    timeout: float = 1.0
    _unconfirmed: bool = False

    @property
    def enabled(self) -> bool:
        return self.min_replicas > 0

    async def run(self, lane: Lane, script: Script, keys: list[str], args: list[Any], counters_key: str,
                  on_written: Callable[[], None] | None = None) -> Any:
        """Run ``script`` and WAIT for the replicas on one connection; NotReplicated when too few confirm.

        ``on_written`` is called as soon as the master has run the script, before the replicas confirm it: a
        writer that orders its writes (the push daemon's committer) may send the next one meanwhile.
        """
        before = [("HINCRBY", counters_key, REPLICA_RETRIES_FIELD, 1)] if self._unconfirmed else []
        wait = ("WAIT", self.min_replicas, max(1, round(self.timeout * 1000)))
        try:
            replies = await lane.run_script(script, keys, args, before=before, after=[wait], last_takes=self.timeout,
                                            on_written=on_written)
        except BaseException:
            # Whether the write landed is unknown: the next one must carry a write of its own.
            self._unconfirmed = True
            raise
        for reply in replies:
            if isinstance(reply, rexc.ResponseError):
                self._unconfirmed = True
                raise reply
        acknowledged = int(replies[-1])
        if acknowledged < self.min_replicas:
            self._unconfirmed = True
            # Too few replicas: maybe the master lost them because it is no longer the master.
            await follow_elected_master(lane.pool)
            raise NotReplicated(self.min_replicas, self.timeout, acknowledged)
        self._unconfirmed = False
        return replies[-2]
