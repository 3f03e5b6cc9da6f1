"""The circuit breakers of a pop daemon: when a destination counts as unreachable, when it is probed, when the
outage ends; on a controllable clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dataq.pop.breaker import Breakers, Outage

VALLEY = "rsync://valley/data"


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Seen:
    opened: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)

    def open(self, outage: Outage) -> None:
        self.opened.append(outage.destination)

    def close(self, outage: Outage) -> None:
        self.closed.append(outage.destination)


def breakers(clock: Clock, seen: Seen, threshold: int = 3, delay: float = 1.0, cap: float = 8.0) -> Breakers:
    return Breakers(threshold, delay, cap, on_open=seen.open, on_close=seen.close, clock=clock,
                    wall_clock=lambda: 5000.0)


def test_a_destination_is_unreachable_after_the_threshold_of_transient_failures_in_a_row() -> None:
    seen = Seen()
    b = breakers(Clock(), seen)
    b.transient(VALLEY, "refused")
    b.transient(VALLEY, "refused")
    assert not b.open
    b.transient(VALLEY, "refused")
    assert b.open and seen.opened == [VALLEY]
    (outage,) = b.outages()
    assert (outage.destination, outage.since, outage.error) == (VALLEY, 5000.0, "refused")


def test_a_success_between_failures_starts_the_count_again() -> None:
    b = breakers(Clock(), Seen())
    for _ in range(5):
        b.transient(VALLEY, "refused")
        b.transient(VALLEY, "refused")
        b.succeeded()
    assert not b.open


def test_permanent_failures_neither_count_nor_reset_the_streak() -> None:
    b = breakers(Clock(), Seen())
    b.transient(VALLEY, "refused")
    b.permanent()
    b.transient(VALLEY, "refused")
    b.permanent()
    assert not b.open
    b.transient(VALLEY, "refused")
    assert b.open


def test_streaks_are_counted_per_destination() -> None:
    b = breakers(Clock(), Seen())
    b.transient(VALLEY, "refused")
    b.transient("next sites a:1", "no answer")
    b.transient(VALLEY, "refused")
    assert not b.open


def test_failed_probes_double_the_wait_up_to_the_cap() -> None:
    clock = Clock()
    b = breakers(clock, Seen(), threshold=1, delay=1.0, cap=8.0)
    b.transient(VALLEY, "refused")
    waits = []
    for _ in range(6):
        wait = b.until_probe()
        waits.append(wait)
        clock.now += wait
        assert b.until_probe() == 0
        b.probe_started()
        b.transient(VALLEY, "refused", probe=True)
    ceilings = [1, 2, 4, 8, 8, 8]
    assert all(c / 2 <= w <= c for w, c in zip(waits, ceilings, strict=True)), waits
    assert b.outages()[0].probes == 6


def test_failures_of_records_that_were_running_when_it_opened_do_not_delay_the_probe() -> None:
    clock = Clock()
    b = breakers(clock, Seen(), threshold=1)
    b.transient(VALLEY, "refused")
    due = b.until_probe()
    for _ in range(10):
        b.transient(VALLEY, "refused")
    assert b.until_probe() == due


def test_a_probe_that_fails_through_its_own_fault_is_followed_by_another_at_once() -> None:
    clock = Clock()
    b = breakers(clock, Seen(), threshold=1)
    b.transient(VALLEY, "refused")
    clock.now += b.until_probe()
    b.probe_started()
    b.permanent(probe=True)
    assert b.open and not b.probe_running
    assert b.until_probe() == 0


def test_one_success_ends_every_outage_and_tells_each() -> None:
    seen = Seen()
    b = breakers(Clock(), seen, threshold=1)
    b.transient(VALLEY, "refused")
    b.transient("next sites a:1", "no answer")
    assert seen.opened == [VALLEY, "next sites a:1"]
    b.probe_started()
    b.succeeded()
    assert not b.open and not b.probe_running
    assert seen.closed == [VALLEY, "next sites a:1"]


def test_the_heartbeat_shows_each_outage_with_its_last_error_and_next_probe() -> None:
    clock = Clock()
    b = breakers(clock, Seen(), threshold=1, delay=4.0, cap=4.0)
    b.transient(VALLEY, "refused")
    b.transient(VALLEY, "timed out")
    (shown,) = b.public()
    assert shown["destination"] == VALLEY and shown["error"] == "timed out" and shown["since"] == 5000.0
    assert 2.0 <= float(shown["next_probe_in"]) <= 4.0  # type: ignore[arg-type]


@pytest.mark.parametrize("threshold", [1, 2, 7])
def test_nothing_opens_below_the_threshold(threshold: int) -> None:
    b = breakers(Clock(), Seen(), threshold=threshold)
    for _ in range(threshold - 1):
        b.transient(VALLEY, "refused")
    assert not b.open
