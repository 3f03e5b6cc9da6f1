"""A record's life in the store: pushed, claimed, acknowledged or failed, reclaimed from dead workers.

Every change that touches more than one key is one Lua script, so a crash of Redis, of a daemon, or of the
network between them leaves each record in exactly one place: active, inactive, delayed or a processing list.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import redis.exceptions as rexc

from dataq.errors import StoreUnavailable
from dataq.record import Record
from dataq.store.base import NOTICE_WORK, StoreBase
from dataq.store.connection import translate, translated
from dataq.store.types import (
    Claim,
    ClaimStatus,
    FailOutcome,
    Flag,
    PushResult,
    Reclaimed,
    RetryPolicy,
    Worker,
)
from dataq.stored_value import decode_stored, encode_stored

PROMOTE_BATCH = 1000
NO_DELAY = RetryPolicy()
RETRY_CLOCK_SKEW = 60.0
"""Seconds a retried push looks back in the event stream before its push time: the stream is stamped by Redis's
clock, the push time by the daemon's, and hosts' clocks differ."""


def _now_ms(now: float | None) -> int:
    return int((time.time() if now is None else now) * 1000)


class LifecycleOps(StoreBase):
    async def push_batch(self, records: Sequence[Record], source: str, now: float | None = None) -> PushResult:
        """Store and queue each record whose id is not tracked yet, in one atomic step (group commit).

        To retry a call whose outcome is unknown (StoreUnavailable), call again with the same records, source
        and ``now``: records the lost attempt stored are then reported as pushed, not as duplicates.
        """
        return await self.push_records([(record, source) for record in records], now)

    @translated
    async def push_records(
        self, items: Sequence[tuple[Record, str]], now: float | None = None, *, retry: bool = False,
        on_written: Callable[[], None] | None = None,
    ) -> PushResult:
        """:meth:`push_batch` with a source per record (the push daemon's group commit of many feeders).

        One round trip, which also tells idle pop daemons there is work. Retry an unknown outcome with the same
        items and ``now`` and ``retry=True``: records the lost attempt stored report as pushed, even those a
        worker has finished since (they are not queued again). ``on_written`` is called once the master holds
        the records, before replicas confirm them (``min_replicas``).
        """
        pushed_at = time.time() if now is None else now
        since = max(1, int((pushed_at - RETRY_CLOCK_SKEW) * 1000)) if retry else 0
        k = self.keys
        if not self.plan.single:
            items = self.plan.resolve(items)
        checksums = [record.checksum for record, _ in items]
        ids = "\n".join(checksums)
        values = "\n".join(encode_stored(items, pushed_at))
        done = self._remembered(checksums)
        again = "".join("1" if record.again else "0" for record, _ in items) \
            if any(record.again for record, _ in items) else ""
        codes = self.plan.codes(record.activity for record, _ in items)  # '' without activities
        args: list[Any] = [self.events_max_len, since, k.work, NOTICE_WORK, ids, values, self.pubsub_mode,
                           done.digests, again, codes, self._named, self.search_names]
        keys = [k.records, k.active, k.events, k.counters, k.rates, *done.keys, k.activities, *self._active_lists[1:]]
        if not self.plan.single:
            keys += [k.rates_of(name) for name in self.plan.names_in_lists]
        if self.search_names:
            keys += [k.names, k.names_count, k.names_before]
        reply = await self._script("push_batch", keys, args, replicated=True, on_written=on_written)
        status, length = reply
        return PushResult(pushed=[ch != "0" for ch in status], active_length=int(length))

    @translated
    async def claim(self, worker: str, max_count: int) -> Claim:
        """Move up to ``max_count`` next-to-run records into the worker's processing list (never blocks)."""
        k = self.keys
        reply = await self._script(
            "claim",
            [k.processing(worker), k.records, k.flags, k.events, k.counters, k.workers, k.shares, *self._active_lists],
            [max_count, self.events_max_len, worker, self._named, self._served],
        )
        status = ClaimStatus(reply[0])
        if len(reply) < 3:
            return Claim(status, [])
        ids, values = reply[1].split("\n"), reply[2].split("\n")
        return Claim(status, [decode_stored(record_id, value) for record_id, value in zip(ids, values, strict=True)])

    @translated
    async def ack(self, worker: str, done: Sequence[tuple[str, str]]) -> list[bool]:
        """Forget finished records; per (id, event detail): True, or False when the worker no longer owns it."""
        if not done:
            return []
        k = self.keys
        ids = "\n".join(record_id for record_id, _ in done)
        details = "\n".join(detail.replace("\n", " ") for _, detail in done)
        now = time.time()
        remembered = self._remembered([record_id for record_id, _ in done], now)
        args: list[Any] = [self.events_max_len, ids, details, remembered.digests, _now_ms(now),
                           remembered.expires_at_ms, self._named]
        rings = [] if self.plan.single else [k.rates_of(name) for name in self.plan.names_in_lists]
        status = await self._script(
            "ack",
            [
                k.processing(worker),
                k.records,
                k.errors,
                k.lasterror,
                k.crashes,
                k.events,
                k.counters,
                k.rates,
                *remembered.current,
                *rings,
            ],
            args,
            replicated=True,
        )
        return [ch == "1" for ch in status]

    @translated
    async def fail(
        self,
        worker: str,
        failures: Sequence[tuple[str, str]],
        *,
        max_errors: int,
        retry: RetryPolicy = NO_DELAY,
        now: float | None = None,
    ) -> list[FailOutcome]:
        """Count a failure per (id, message); retry (after the policy's delay), or deactivate once max_errors is
        exceeded."""
        if not failures:
            return []
        k = self.keys
        args: list[Any] = [self.events_max_len, max_errors, _now_ms(now), int(retry.delay * 1000), retry.backoff,
                           int(retry.max_delay * 1000), self._named]
        for record_id, message in failures:
            args += [record_id, message, 1.0 - retry.jitter * random.random()]
        status = await self._script(
            "fail",
            [
                k.processing(worker),
                k.records,
                k.inactive,
                k.delayed,
                k.errors,
                k.lasterror,
                k.events,
                k.counters,
                k.rates,
                *self._active_lists,
            ],
            args,
            replicated=True,
        )
        return [FailOutcome(ch) for ch in status]

    @translated
    async def postpone(self, worker: str, waiting: Sequence[tuple[str, str]]) -> list[bool]:
        """Records whose destination is unreachable go back to the next-to-run end, in the order given (the first
        runs first), with their message as last error and no failure counted; per (id, message): True, or
        False when the worker no longer owns it."""
        if not waiting:
            return []
        k = self.keys
        args: list[Any] = [self.events_max_len, self._named]
        for record_id, message in waiting:
            args += [record_id, message]
        status = await self._script("postpone", [k.processing(worker), k.records, k.lasterror, k.events, k.counters,
                                                 *self._active_lists], args, replicated=True)
        if "w" in status:
            await self._announce_work()
        return [ch == "w" for ch in status]

    @translated
    async def promote_due(self, now: float | None = None) -> int:
        """Move delayed records whose retry time has come back to the active list."""
        k = self.keys
        moved = int(await self._script("promote", [k.delayed, k.records, *self._active_lists],
                                       [_now_ms(now), PROMOTE_BATCH, self._named]))
        if moved:
            await self._announce_work()
        return moved

    async def _reclaim(self, worker: str, mode: str, max_crashes: int) -> Reclaimed | None:
        k = self.keys
        returned, deactivated = await self._script(
            "reclaim",
            [
                k.processing(worker),
                k.records,
                k.inactive,
                k.crashes,
                k.lasterror,
                k.heartbeat(worker),
                k.workers,
                k.events,
                k.counters,
                *self._active_lists,
            ],
            [self.events_max_len, worker, mode, max_crashes, self._named],
        )
        if returned < 0:
            return None
        if returned:
            await self._announce_work()
        return Reclaimed(int(returned), int(deactivated))

    @translated
    async def release(self, worker: str) -> Reclaimed:
        """The worker itself gives every record it holds back to the next-to-run end (graceful shutdown)."""
        result = await self._reclaim(worker, "release", 0)
        assert result is not None  # release mode never declines
        return result

    @translated
    async def reclaim_dead(self, worker: str, max_crashes: int) -> Reclaimed | None:
        """Give a dead worker's records back (None if its heartbeat is alive after all)."""
        return await self._reclaim(worker, "crash", max_crashes)

    @translated
    async def dead_workers(self) -> list[str]:
        """Registered workers whose heartbeat has expired."""
        names: list[str] = await self.r.hkeys(self.keys.workers)
        if not names:
            return []
        pipe = self.r.pipeline(transaction=False)
        for name in names:
            pipe.exists(self.keys.heartbeat(name))
        alive = await pipe.execute()
        return [name for name, exists in zip(names, alive, strict=True) if not exists]

    @translated
    async def heartbeat(self, worker: str, info: dict[str, object], stats: dict[str, object], ttl: float) -> bool:
        """Refresh the worker's heartbeat; True when it was not registered (first beat, or swept as dead)."""
        k = self.keys
        registered = await self._script(
            "heartbeat",
            [k.heartbeat(worker), k.workers],
            [
                worker,
                int(ttl * 1000),
                json.dumps(info),
                json.dumps({**stats, "at": time.time()}),
            ],
        )
        return bool(registered)

    @translated
    async def unregister(self, worker: str) -> None:
        """Leave the registry (after release); the heartbeat goes with it."""
        pipe = self.r.pipeline(transaction=True)
        pipe.hdel(self.keys.workers, worker)
        pipe.delete(self.keys.heartbeat(worker))
        await pipe.execute()

    @translated
    async def workers(self) -> list[Worker]:
        registry: dict[str, str] = await self.r.hgetall(self.keys.workers)
        names = sorted(registry)
        beats = await self.r.mget([self.keys.heartbeat(n) for n in names]) if names else []
        return [
            Worker(name, json.loads(registry[name]), json.loads(beat) if beat else None)
            for name, beat in zip(names, beats, strict=True)
        ]

    @translated
    async def processing(self, worker: str) -> list[str]:
        """Ids the worker holds, newest claim first."""
        ids: list[str] = await self.r.lrange(self.keys.processing(worker), 0, -1)
        return ids

    @translated
    async def set_flag(self, flag: Flag, on: bool, who: str = "cli") -> bool:
        """Switch a flag and notify every daemon; returns the previous state."""
        k = self.keys
        previous = await self._script(
            "set_flag",
            [k.flags, k.events],
            [flag.value, "on" if on else "off", self.events_max_len, k.notices, who, self.pubsub_mode],
            replicated=True,
        )
        return bool(previous == "on")

    @translated
    async def flags(self) -> dict[Flag, bool]:
        values: dict[str, str] = await self.r.hgetall(self.keys.flags)
        return {flag: values.get(flag.value, "on") != "off" for flag in Flag}

    async def notices(self, *, work: bool = True) -> AsyncIterator[str]:
        """Yield the queue's pub/sub notices (``flag:<name>:<on|off>``, and ``work`` unless ``work`` is False)
        until the connection drops.

        Raises StoreUnavailable when it does; the caller resubscribes after a backoff and re-reads the flags,
        since notices sent meanwhile are lost.
        """
        channels = (self.keys.notices, self.keys.work) if work else (self.keys.notices,)
        pubsub = self.r.pubsub()
        try:
            if self.cluster is not None:
                await pubsub.ssubscribe(*channels)
            else:
                await pubsub.subscribe(*channels)
            while True:
                message = await pubsub.get_message(timeout=None)
                if message is None:  # none without a timeout; a wait that ends empty is waited again
                    continue
                kind = message["type"]
                if kind in ("message", "smessage"):
                    yield str(message["data"])
                elif kind in ("sunsubscribe", "unsubscribe"):
                    # Never asked for: a cluster node that loses the queue's slot (a fail-over, a resharding)
                    # unsubscribes its shard channels' subscribers, who must find the slot's new master.
                    if self.cluster is not None:
                        self.cluster.mark_stale()
                    raise StoreUnavailable("the queue's notices moved to another Redis node; subscribing again")
        except (rexc.RedisError, OSError) as exc:
            raise translate(exc) from exc
        finally:
            with contextlib.suppress(rexc.RedisError, OSError):
                await pubsub.aclose()

    @translated
    async def ping(self) -> bool:
        return bool(await self.r.ping())
