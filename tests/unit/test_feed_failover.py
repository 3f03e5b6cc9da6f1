"""Which push daemon a feeder talks to next, transition by transition: the forwarder, ``dataq feed`` and the
hand-on all go through this one machine. Time is the test's (every transition is given ``now``)."""

from __future__ import annotations

import pytest

from dataq.feed.failover import Failover, Phase, Step
from dataq.feed.link import FeedError
from dataq.runtime.backoff import Backoff

FIRST, SECOND, THIRD = "a:1", "b:2", "c:3"
RETRY_FOR = 60.0
FAILBACK_AFTER = 30.0


def machine(*names: str, retry_for: float = RETRY_FOR) -> Failover:
    return Failover(names or (FIRST, SECOND), retry_for=retry_for, failback_after=FAILBACK_AFTER,
                    backoff=Backoff(initial=1.0, cap=1.0))


def on_the_second(failover: Failover) -> None:
    """Connected to the second at time 0, the first having refused."""
    assert failover.connect_failed(0.0, "cannot connect: refused") == Step(1)
    failover.connected(0.0)


def failing_back(failover: Failover) -> None:
    """On the second since time 0, then leaving it for the first after ``FAILBACK_AFTER``."""
    on_the_second(failover)
    assert failover.leave_due(FAILBACK_AFTER)
    assert failover.ended() == Step(0, failure=False)


def test_a_feeder_tries_the_first_push_daemon_first() -> None:
    failover = machine()
    assert failover.current == 0 and failover.phase is Phase.TRYING_NEXT


def test_connected_to_the_first_it_never_leaves_it() -> None:
    failover = machine()
    failover.connected(0.0)
    assert failover.phase is Phase.CONNECTED
    assert not failover.leave_due(10 * FAILBACK_AFTER) and failover.leave_in(0.0) is None


def test_a_refused_connection_tries_the_next_at_once_and_reports_the_failure() -> None:
    failover = machine(FIRST, SECOND, THIRD)
    assert failover.connect_failed(0.0, "cannot connect: refused") == Step(1, delay=0.0, failure=True)
    assert failover.phase is Phase.TRYING_NEXT
    assert failover.connect_failed(0.1, "cannot connect: refused") == Step(2)


def test_when_every_one_failed_in_a_round_it_waits_a_backoff_before_the_first_again() -> None:
    failover = machine()
    failover.connect_failed(0.0, "refused")
    step = failover.connect_failed(0.1, "refused")
    assert step.target == 0 and 0.5 <= step.delay <= 1.0 and step.failure
    assert failover.phase is Phase.WAITING


def test_failures_that_last_retry_for_end_the_feed_at_the_end_of_a_round_naming_each() -> None:
    failover = machine()
    failover.connect_failed(0.0, "cannot connect: refused")
    failover.connect_failed(1.0, "cannot connect: refused")
    assert failover.connect_failed(RETRY_FOR + 1, "cannot connect: timed out") == Step(1)  # not mid-round
    with pytest.raises(FeedError, match=r"cannot reach any push daemon \(a:1: cannot connect: timed out; "
                                        r"b:2: connection lost: reset\)"):
        failover.lost(RETRY_FOR + 2, "connection lost: reset", progressed=False)


def test_a_single_push_daemon_is_named_alone_when_the_feed_gives_up() -> None:
    failover = machine(FIRST, retry_for=5.0)
    assert failover.connect_failed(0.0, "cannot connect: refused").delay > 0
    with pytest.raises(FeedError, match=r"^cannot reach the push daemon at a:1 \(cannot connect: refused\)$"):
        failover.connect_failed(5.0, "cannot connect: refused")


def test_with_no_retry_time_each_is_tried_once_and_then_the_feed_gives_up() -> None:
    """The hand-on's way: one round over the next sites."""
    failover = machine(FIRST, SECOND, THIRD, retry_for=0.0)
    assert failover.connect_failed(0.0, "refused") == Step(1)
    assert failover.connect_failed(0.0, "refused") == Step(2)
    with pytest.raises(FeedError):
        failover.connect_failed(0.0, "refused")


def test_a_connection_lost_after_replies_came_is_a_fresh_failure() -> None:
    failover = machine(FIRST, retry_for=10.0)
    failover.connect_failed(0.0, "refused")
    failover.connected(5.0)
    step = failover.lost(12.0, "connection lost: reset", progressed=True)  # 12 s after the first failure
    assert step.target == 0 and 0.5 <= step.delay <= 1.0
    failover.connected(13.0)
    with pytest.raises(FeedError):  # failing since 12.0
        failover.lost(22.0, "connection lost: reset", progressed=False)


def test_a_connection_lost_without_progress_goes_on_failing_from_when_it_began() -> None:
    failover = machine(FIRST, retry_for=10.0)
    failover.connect_failed(0.0, "refused")
    failover.connected(5.0)
    with pytest.raises(FeedError):
        failover.lost(10.0, "connection lost: reset", progressed=False)


def test_on_a_later_one_it_leaves_after_failback_after_and_then_fails_back_to_the_first() -> None:
    failover = machine()
    on_the_second(failover)
    assert not failover.leave_due(FAILBACK_AFTER - 1) and failover.leave_in(FAILBACK_AFTER - 1) == 1.0
    assert failover.leave_due(FAILBACK_AFTER) and failover.leaving
    assert failover.ended() == Step(0, failure=False)
    assert failover.phase is Phase.FAILING_BACK and failover.current == 0


def test_failing_back_to_a_first_still_away_returns_to_the_later_one_at_once_unreported() -> None:
    failover = machine()
    failing_back(failover)
    assert failover.connect_failed(FAILBACK_AFTER, "refused") == Step(1, failure=False)
    assert failover.phase is Phase.TRYING_NEXT


def test_failing_back_to_a_first_that_drops_the_connection_at_once_returns_to_the_later_one() -> None:
    failover = machine()
    failing_back(failover)
    failover.connected(FAILBACK_AFTER)
    assert failover.lost(FAILBACK_AFTER + 1, "connection lost: reset", progressed=False) == Step(1, failure=False)


def test_a_first_that_worked_for_a_while_after_failing_back_fails_like_any_other() -> None:
    failover = machine()
    failing_back(failover)
    failover.connected(FAILBACK_AFTER)
    assert failover.lost(FAILBACK_AFTER + 5, "connection lost: reset", progressed=True) == Step(1, failure=True)


def test_a_connection_that_ends_with_everything_answered_ends_the_feed() -> None:
    failover = machine()
    on_the_second(failover)
    assert failover.ended() is None


def test_back_on_the_later_one_the_failback_clock_starts_again() -> None:
    failover = machine()
    failing_back(failover)
    failover.connect_failed(FAILBACK_AFTER, "refused")
    failover.connected(FAILBACK_AFTER + 1)
    assert not failover.leaving and not failover.leave_due(2 * FAILBACK_AFTER)
    assert failover.leave_due(2 * FAILBACK_AFTER + 1)


def test_a_feeder_needs_a_push_daemon() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Failover([], retry_for=1.0, failback_after=1.0, backoff=Backoff())
