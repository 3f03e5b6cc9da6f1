"""The names index on a real Redis: every stored record is found by its file name, a glob or its path, the index
stays within its bounds, and a queue that keeps no names keeps nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dataq.record import Record
from dataq.store import NameQuery, QueueStore
from tests.helpers import checksum_of

NIGHT = "/data/2026-11-28"


def observation(n: int, night: str = NIGHT, kind: str = "fits") -> Record:
    return Record(path=f"{night}/obs_{n:04d}.{kind}", checksum=checksum_of(n), size=1000 + n)


@pytest.fixture
async def small(redis_url: str) -> AsyncIterator[QueueStore]:
    """A queue whose names index renames itself every 10 names."""
    store = QueueStore.from_url(redis_url, "transfer", search_names=10)
    yield store
    await store.close()


async def found(store: QueueStore, text: str, limit: int = 100) -> list[str]:
    return sorted(hit.path for hit in await store.find_names(NameQuery(text), limit))


async def test_a_pushed_file_is_found_by_its_name_a_glob_or_its_path(store: QueueStore) -> None:
    await store.push_batch([observation(n) for n in range(5)], "test")
    await store.push_batch([observation(7, "/data/2026-11-29", "hdr"), observation(8, "/data/2026-11-29")], "test")
    assert await found(store, "obs_0003.fits") == [f"{NIGHT}/obs_0003.fits"]
    assert await found(store, "obs_000[12].fits") == [f"{NIGHT}/obs_0001.fits", f"{NIGHT}/obs_0002.fits"]
    assert await found(store, "*.hdr") == ["/data/2026-11-29/obs_0007.hdr"]
    assert await found(store, "?bs_0008.*") == ["/data/2026-11-29/obs_0008.fits"]
    assert await found(store, "/data/2026-11-29/*") == ["/data/2026-11-29/obs_0007.hdr",
                                                         "/data/2026-11-29/obs_0008.fits"]
    assert await found(store, f"{NIGHT}/obs_0004.fits") == [f"{NIGHT}/obs_0004.fits"]
    assert len(await found(store, "obs_*")) == 7
    assert await found(store, "obs_0003") == []  # a name is matched whole, or by a glob
    assert await found(store, "/elsewhere/obs_0003.fits") == []
    (hit,) = await store.find_names(NameQuery("obs_0002.fits"), 10)
    assert (hit.name, hit.id, hit.size) == ("obs_0002.fits", checksum_of(2), 1002)


async def test_a_search_stops_at_its_limit_and_names_each_record_once(store: QueueStore) -> None:
    await store.push_batch([observation(n) for n in range(30)], "test")
    assert len(await store.find_names(NameQuery("obs_*"), 12)) == 12
    assert len(await store.find_names(NameQuery("*.fits"), 12)) == 12
    # Pushed again (a duplicate) the record is not indexed again.
    await store.push_batch([observation(3)], "test")
    assert await found(store, "obs_0003.fits") == [f"{NIGHT}/obs_0003.fits"]


async def test_the_index_keeps_the_newest_names_within_twice_its_size(small: QueueStore) -> None:
    for batch in range(7):
        await small.push_batch([observation(n) for n in range(batch * 4, batch * 4 + 4)], "test")
    names = [hit.name for hit in await small.find_names(NameQuery("obs_*"), 100)]
    assert 10 <= len(names) < 20
    assert "obs_0027.fits" in names and "obs_0000.fits" not in names


async def test_globs_with_brackets_and_redis_pattern_characters_match_as_the_operator_wrote_them(
        store: QueueStore) -> None:
    odd = [Record(path="/d/a\\b[1].fits", checksum=checksum_of(1), size=1),
           Record(path="/d/x^y.fits", checksum=checksum_of(2), size=1),
           Record(path="/d/xay.fits", checksum=checksum_of(3), size=1)]
    await store.push_batch(odd, "test")
    assert await found(store, "*\\b[[]1].fits") == ["/d/a\\b[1].fits"]
    assert await found(store, "*[!a]y.fits") == ["/d/x^y.fits"]
    assert await found(store, "*[a]y.fits") == ["/d/xay.fits"]


async def test_a_queue_that_keeps_no_names_writes_no_index(redis_url: str) -> None:
    store = QueueStore.from_url(redis_url, "transfer", search_names=0)
    try:
        await store.push_batch([observation(n) for n in range(3)], "test")
        assert await found(store, "obs_*") == []
        assert (await store.summary()).active == 3
    finally:
        await store.close()


async def test_a_name_holding_glob_characters_is_found_as_written(store: QueueStore) -> None:
    await store.push_batch([Record(path="/d/obs[1].fits", checksum=checksum_of(1), size=1),
                            Record(path="/d/obs1.fits", checksum=checksum_of(2), size=1)], "test")
    assert await found(store, "obs[1].fits") == ["/d/obs1.fits", "/d/obs[1].fits"], "as a glob, and as written"
    assert await found(store, "/d/obs[1].fits") == ["/d/obs1.fits", "/d/obs[1].fits"]


async def test_a_record_is_found_by_its_id_under_a_name_many_records_share(store: QueueStore) -> None:
    nights = [Record(path=f"/data/night{n:03d}/raw.fits", checksum=checksum_of(n), size=n + 1) for n in range(120)]
    for first in range(0, 120, 7):
        await store.push_batch(nights[first:first + 7], "test")
    hit = await store.find_id(checksum_of(3), NameQuery("raw.fits"))
    assert hit is not None and (hit.path, hit.size) == ("/data/night003/raw.fits", 4), "beyond the newest 50"
    assert await store.find_id("f" * 32, NameQuery("raw.fits")) is None
