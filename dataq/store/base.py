"""What every part of the store shares: one client, one queue's keys, the loaded scripts."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel

from dataq.activities import Plan
from dataq.config.queue_settings import DEFAULT_SEARCH_NAMES
from dataq.keys import QueueKeys
from dataq.store.cluster import SlotMap
from dataq.store.connection import load_scripts
from dataq.store.lane import Lane, Script
from dataq.store.remembered import DEFAULT_REMEMBER_DONE, Lookup, lookup
from dataq.store.replication import Replication
from dataq.store.replies import DecodedRedis

NOTICE_WORK = "work"
"""Published when records become runnable, so idle pop daemons claim at once instead of polling."""

DEFAULT_EVENTS_MAX_LEN = 100_000
"""Event stream entries kept per queue when the settings say nothing (trimming is approximate, so a little
more); a push batch is one entry."""


class StoreBase:
    """Holds the client, the queue's keys and its scripts; the operations live in the mixins."""

    def __init__(
        self,
        client: aioredis.Redis,
        queue: str,
        *,
        events_max_len: int = DEFAULT_EVENTS_MAX_LEN,
        replication: Replication | None = None,
        sentinel: Sentinel | None = None,
        cluster: SlotMap | None = None,
        remember_done: float = DEFAULT_REMEMBER_DONE,
        plan: Plan | None = None,
        search_names: int = DEFAULT_SEARCH_NAMES,
    ) -> None:
        self.client = client
        self.r = cast(DecodedRedis, client)
        """The client with its replies typed as they come, decoded (:mod:`.replies`)."""
        self.queue = queue
        self.keys = QueueKeys(queue)
        self.events_max_len = events_max_len
        self.replication = replication or Replication()
        self.sentinel = sentinel
        """The sentinels this store's master was found through (None: a Redis URL)."""
        self.cluster = cluster
        """Where in a Redis Cluster this queue's master is (None: not a cluster)."""
        self.pubsub_mode = "sharded" if cluster is not None else "plain"
        """Sharded pub/sub on a cluster (the queue's channels share its slot, so its master alone serves them);
        what the scripts that publish are told."""
        self.remember_done = remember_done
        """Seconds done records are remembered (:mod:`.remembered`)."""
        self.search_names = search_names
        """The size of the names index (:mod:`.names`; 0: none is kept)."""
        self.plan = plan or Plan()
        """The queue's activities (:mod:`dataq.activities`): which active lists the scripts fill and serve."""
        # What the scripts take of the plan, built once: a claim or a push passes them every time.
        self._active_lists = [self.keys.active, *(self.keys.active_of(name) for name in self.plan.named)]
        """The block of active lists the scripts take (``lib/activities.lua``): default's, then the named ones'."""
        self._named = "\n".join(self.plan.named)
        """The named activities as the scripts take them: joined by newlines."""
        self._served = ",".join(f"{activity.name}:{activity.weight}" for activity in self.plan.served)
        """The activities in the order a claim looks at them, as ``claim.lua`` takes them."""
        self._scripts: dict[str, Script] = load_scripts()
        self._lane = Lane(client)

    async def _script(self, name: str, keys: list[str], args: list[Any], *, replicated: bool = False,
                      on_written: Callable[[], None] | None = None) -> Any:
        """Run a script; ``replicated``: a write a fail-over must not undo, confirmed by ``min_replicas``.
        ``on_written`` is called once the master has run it (with replicas to wait for, before they confirm)."""
        script = self._scripts[name]
        if replicated and self.replication.enabled:
            return await self.replication.run(self._lane, script, keys, args, self.keys.counters, on_written)
        (reply,) = await self._lane.run_script(script, keys, args, on_written=on_written)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _remembered(self, ids: Sequence[str], now: float | None = None) -> Lookup:
        """Where the remembered done records of ``ids`` are (their shards' keys and their digests)."""
        return lookup(self.keys, ids, time.time() if now is None else now, self.remember_done)

    async def _announce_work(self) -> None:
        """Tell idle pop daemons that records became runnable (a hint: they also poll)."""
        await self.r.execute_command("SPUBLISH" if self.cluster is not None else "PUBLISH", self.keys.work,
                                     NOTICE_WORK)

    async def close(self) -> None:
        try:
            await self._lane.close()
            await self.client.aclose()
        finally:
            if self.sentinel is not None:
                await self.sentinel.aclose()
            if self.cluster is not None:
                await self.cluster.close()
