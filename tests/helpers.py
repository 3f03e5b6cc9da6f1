"""Small builders shared by tests."""

from __future__ import annotations

import asyncio
import hashlib

import fakeredis

from dataq.actions import ActionContext
from dataq.config import QueueSettings
from dataq.record import Record
from dataq.store import QueueStore


def checksum_of(n: int) -> str:
    return hashlib.md5(str(n).encode()).hexdigest()


def make_records(count: int, start: int = 0) -> list[Record]:
    """Records shaped like the seed's test data, with distinct ids."""
    return [
        Record(
            path=f"/noao-tuc-z1/mtn/20140708/ct15m/smarts/c15e_140708_{n:06d}_ori.hdr",
            checksum=checksum_of(n),
            size=9922 + n,
        )
        for n in range(start, start + count)
    ]


def fake_store(queue: str = "transfer") -> QueueStore:
    """A store on fakeredis (with its Lua scripts), for pure unit tests: no server, nothing to close."""
    return QueueStore(fakeredis.FakeAsyncRedis(decode_responses=True), queue)


def action_context(queue: QueueSettings | None = None, *, concurrency: int = 4,
                   store: QueueStore | None = None) -> ActionContext:
    """What a pop daemon gives its actions; by default leases of a store on fakeredis."""
    queue = queue or QueueSettings("transfer")
    return ActionContext(queue, concurrency, store or fake_store(queue.name))


async def until_subscribed(store: QueueStore, channel: str, count: int = 1, timeout: float = 10.0) -> None:
    """Wait until ``count`` clients listen on ``channel`` (PUBSUB NUMSUB): a notice published before that is lost
    to them, so a test publishes only after this."""
    async with asyncio.timeout(timeout):
        while True:
            ((_, listening),) = await store.r.pubsub_numsub(channel)
            if listening >= count:
                return
            await asyncio.sleep(0.01)
