"""The done rate an ETA is reckoned at, read from the rates ring's buckets (``RateHistory.since_busy``)."""

from __future__ import annotations

from dataq.store import RateBucket, RateHistory

NOW = 1_000_005.0  # 5 s into the bucket that began at 1,000,000


def history(done_per_bucket: list[int]) -> RateHistory:
    """Buckets of 10 s ending with the current one (the last count), oldest first."""
    first = 1_000_000 - 10 * (len(done_per_bucket) - 1)
    return RateHistory(NOW, 0.0, tuple(RateBucket(float(first + 10 * n), {"done": count})
                                        for n, count in enumerate(done_per_bucket)))


def test_idle_minutes_before_the_work_do_not_count() -> None:
    assert history([0] * 25 + [40, 100, 50]).since_busy("done", 300) == (150, 15.0)


def test_the_first_busy_bucket_counts_until_a_whole_one_has_followed_it() -> None:
    assert history([0] * 26 + [40, 50]).since_busy("done", 300) == (90, 15.0)


def test_a_burst_followed_by_quiet_is_the_rate_there_is() -> None:
    assert history([0] * 20 + [400, 0, 0, 0]).since_busy("done", 300) == (400, 35.0)
    assert history([0] * 30).since_busy("done", 300) == (0, 0.0)
