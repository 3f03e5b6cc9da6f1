"""Reading the rates ring: which buckets make "the last minute", and the Lua library's constants are the
store's."""

from __future__ import annotations

import re
from importlib import resources

from dataq.store.connection import SCRIPT_NAMES, script_source
from dataq.store.rate_ring import DAY_BUCKET_SECONDS, DAY_SLOTS, RATE_BUCKET_SECONDS, RATE_SLOTS, lua_constants
from dataq.store.rates import RateBucket, RateHistory


def bucket(start: float, pushed: int = 0, done: int = 0) -> RateBucket:
    return RateBucket(start, {"pushed": pushed, "duplicate": 0, "done": done, "failed": 0, "done_bytes": 100 * done})


def history(now: float, since: float = 0.0) -> RateHistory:
    """Seven buckets of 10 s ending with the one ``now`` falls in, 10 pushed and 1 done in each."""
    current = now // RATE_BUCKET_SECONDS * RATE_BUCKET_SECONDS
    return RateHistory(now, since, tuple(bucket(current - 10 * i, 10, 1) for i in reversed(range(7))))


def test_the_last_minute_is_the_current_bucket_so_far_and_the_five_before_it() -> None:
    counts, covered, complete = history(now=1_000_004.0).totals(60)
    assert counts == {"pushed": 60, "duplicate": 0, "done": 6, "failed": 0, "done_bytes": 600}
    assert covered == 54.0 and complete


def test_counting_that_began_within_the_window_is_incomplete_and_covers_only_since_then() -> None:
    counts, covered, complete = history(now=1_000_004.0, since=999_990.0).totals(60)
    assert counts["pushed"] == 60  # every bucket the ring kept still counts: only the span shrinks
    assert covered == 14.0 and not complete


def test_a_window_of_one_bucket_is_the_current_one() -> None:
    counts, covered, _ = history(now=1_000_007.5).totals(10)
    assert counts["pushed"] == 10 and covered == 7.5


def test_the_lua_library_counts_in_the_buckets_and_kinds_the_store_reads() -> None:
    """The ring's shape is the store's, put before every script: the library declares none of its own."""
    library = (resources.files("dataq.store") / "lua" / "lib" / "rates.lua").read_text()
    assert re.search(r"^local RATE_", library, re.MULTILINE) is None
    for name in SCRIPT_NAMES:
        source = script_source(name)
        assert source.startswith(lua_constants()) and source.count("local RATE_") == 2
        assert source.count("local DAY_") == 1
    assert lua_constants() == (f"local RATE_BUCKET_SECONDS, RATE_SLOTS = {RATE_BUCKET_SECONDS}, {RATE_SLOTS}\n"
                               f"local DAY_BUCKET_SECONDS, DAY_SLOTS, DAY_PREFIX = {DAY_BUCKET_SECONDS}, "
                               f"{DAY_SLOTS}, 'd:'\n"
                               "local RATE_KINDS = { 'pushed', 'duplicate', 'done', 'failed', 'done_bytes', "
                               "'backlog_age' }")
