"""Leases: one writer at a time for work outside Redis (the archive catalog's appends), on redis-py's Lock.

The Lock holds a random token under the queue's ``lock:<name>`` key with a TTL, so a holder that dies frees the
lease within that TTL; while the holder lives, a task renews it every third of the TTL. redis-py's errors leave
as dataq errors: a lease not taken in time, or found lost when let go, is :class:`~dataq.errors.LeaseLost`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import redis.exceptions as rexc
from redis.asyncio.lock import Lock

from dataq.errors import LeaseLost
from dataq.logs import get_logger
from dataq.runtime.supervise import cancel_and_wait
from dataq.store.base import StoreBase
from dataq.store.connection import translate

LEASE_POLL = 0.05
"""Seconds between two attempts at a lease someone else holds (an append holds it for well under a second)."""
RENEWALS_PER_TTL = 3
"""A held lease is renewed this many times per TTL, so one late renewal does not lose it."""

log = get_logger()


class LeaseOps(StoreBase):
    @contextlib.asynccontextmanager
    async def lease(self, name: str, *, ttl: float, wait: float) -> AsyncIterator[None]:
        """Hold the lease ``name`` inside the block, waiting up to ``wait`` seconds for another holder to let go.

        Raises LeaseLost when it is not taken within ``wait``, or when the block ends and the lease turns out
        to have been lost meanwhile (it expired unrenewed, or Redis restarted without it): then another writer
        may have worked at the same time, and the caller should not count its work as done alone.
        """
        lock = Lock(self.client, self.keys.lock(name), timeout=ttl, sleep=LEASE_POLL, blocking_timeout=wait,
                    thread_local=False)
        try:
            taken = await lock.acquire()
        except (rexc.RedisError, OSError) as exc:
            raise translate(exc) from exc
        if not taken:
            raise LeaseLost(f"the lease {name!r} stayed with another holder for {wait:g} s")
        renewer = asyncio.create_task(_keep(lock, name, ttl), name=f"lease {name}")
        try:
            yield
        except BaseException:
            await _let_go(lock, name, renewer, quiet=True)
            raise
        await _let_go(lock, name, renewer, quiet=False)


async def _keep(lock: Lock, name: str, ttl: float) -> None:
    while True:
        await asyncio.sleep(ttl / RENEWALS_PER_TTL)
        try:
            await lock.reacquire()
        except rexc.LockNotOwnedError:
            log.error("a lease was lost while held (Redis restarted without it, or a renewal came too late); "
                      "another writer may work at the same time", lease=name)
            return
        except (rexc.RedisError, OSError) as exc:
            log.warning("cannot renew a lease; retrying", lease=name, error=str(exc))


async def _let_go(lock: Lock, name: str, renewer: asyncio.Task[None], *, quiet: bool) -> None:
    await cancel_and_wait([renewer])  # a renewal under way may lose a single cancel, and renew on for ever
    try:
        await lock.release()
    except rexc.LockError as exc:
        if not quiet:
            raise LeaseLost(f"the lease {name!r} was lost while held: another writer may have worked meanwhile") \
                from exc
    except (rexc.RedisError, OSError) as exc:
        # It expires by itself within its TTL.
        log.warning("cannot let go of a lease; it expires by itself", lease=name, error=str(exc))
