"""Small builders shared by tests."""

from __future__ import annotations

import asyncio
import hashlib
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

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


async def until_subscribed(store: QueueStore, channel: str, count: int = 1, timeout: float = 10.0) -> None:
    """Wait until ``count`` clients listen on ``channel`` (PUBSUB NUMSUB): a notice published before that is lost
    to them, so a test publishes only after this."""
    async with asyncio.timeout(timeout):
        while True:
            ((_, listening),) = await store.r.pubsub_numsub(channel)
            if listening >= count:
                return
            await asyncio.sleep(0.01)


def scrape(url: str) -> dict[str, float]:
    """A metrics endpoint's samples: ``{'name{label="value",...}': value}``, the labels in alphabetical order."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {sample.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items())) + "}": sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}
