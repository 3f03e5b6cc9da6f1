"""Capped exponential backoff with jitter: how every retry loop of dataq waits, for as long as it must."""

from __future__ import annotations

from dataq.runtime.backoff import Backoff


def test_delays_grow_from_the_initial_wait_to_the_cap_with_jitter_below_each_ceiling() -> None:
    backoff = Backoff(initial=0.1, cap=1.0)
    delays = [backoff.next_delay() for _ in range(8)]
    for attempt, delay in enumerate(delays):
        ceiling = min(1.0, 0.1 * 2**attempt)
        assert ceiling / 2 <= delay <= ceiling
    backoff.reset()
    assert backoff.next_delay() <= 0.1


def test_a_loop_that_retries_for_ever_keeps_getting_the_cap() -> None:
    backoff = Backoff(initial=0.05, cap=30.0)
    for _ in range(5000):  # days of an outage retried every 30 s
        delay = backoff.next_delay()
    assert 15.0 <= delay <= 30.0
