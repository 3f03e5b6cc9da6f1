"""``network_move``'s batch size follows the link: a simulated destination with a round trip, a bandwidth shared
by the calls at once, and failures, observed as the action observes its rsync calls."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from dataq.actions.transfer_tuner import HORIZON, SETTLE, TransferTuner

FILE = 20_000
"""Bytes of each file (the cascade benchmark's)."""


@dataclass
class Destination:
    """A link: ``round_trips`` each rsync call pays, a round trip's seconds, bytes per second shared by ``calls``
    at once, a cost per file on the far side, and some noise."""

    round_trip: float
    bandwidth: float
    per_file: float = 0.0002
    round_trips: int = 7
    calls: int = 4
    noise: float = 0.05

    def call(self, files: int, rng: random.Random) -> tuple[float, int]:
        size = files * FILE
        seconds = self.round_trips * self.round_trip + size / (self.bandwidth / self.calls) + files * self.per_file
        return seconds * rng.uniform(1 - self.noise, 1 + self.noise), size


def run(tuner: TransferTuner, destination: Destination, calls: int, seed: int = 1) -> list[int]:
    """The batch size after each of ``calls`` full batches."""
    rng = random.Random(seed)
    sizes = []
    for _ in range(calls):
        seconds, size = destination.call(tuner.batch_size, rng)
        tuner.observe(seconds, size, tuner.batch_size)
        sizes.append(tuner.batch_size)
    return sizes


LONG = Destination(round_trip=0.15, bandwidth=50e6)
"""150 ms round trips, 400 Mbit/s."""
LAN = Destination(round_trip=0.0005, bandwidth=110e6)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_over_a_long_link_batches_grow_to_the_most_within_a_few_steps(seed: int) -> None:
    tuner = TransferTuner("rsync://archive/data", least=100, most=1000)
    sizes = run(tuner, LONG, 40, seed)
    assert sizes[-1] == 1000
    assert sizes.index(1000) < 5 * 4, "at most five steps of four calls each"
    assert tuner.last is not None and "on round trips and set-up: larger batches" in tuner.last.reason
    assert tuner.status()["batch_size"] == 1000


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_on_a_lan_batches_stay_small_but_for_a_probe_now_and_then(seed: int) -> None:
    tuner = TransferTuner("rsync://valley/data", least=100, most=1000)
    sizes = run(tuner, LAN, 500, seed)
    assert max(sizes) <= 200, "one step up to learn the link at most"
    assert sizes.count(100) >= 0.75 * len(sizes), "back where a batch reaches the next site soonest"


def test_a_link_that_gets_long_grows_the_batches_and_one_that_gets_short_shrinks_them() -> None:
    tuner = TransferTuner("rsync://archive/data", least=100, most=1000)
    run(tuner, LAN, 40)
    assert run(tuner, LONG, 60)[-1] == 1000
    assert run(tuner, Destination(round_trip=0.0005, bandwidth=110e6, per_file=0.005), 200)[-1] < 1000


def test_failed_calls_halve_the_batches_down_to_the_least() -> None:
    tuner = TransferTuner("rsync://archive/data", least=100, most=1000)
    run(tuner, LONG, 40)
    assert tuner.batch_size == 1000
    tuner.observe(30.0, 0, 1000, failed=True)
    assert tuner.batch_size == 500
    assert tuner.last is not None and "failed" in tuner.last.reason
    for _ in range(5):
        tuner.observe(30.0, 0, 1000, failed=True)
    assert tuner.batch_size == 100


def test_batches_never_grow_past_the_operators_limit_nor_change_when_it_is_the_batch_size() -> None:
    capped = TransferTuner("rsync://archive/data", least=100, most=300)
    assert max(run(capped, LONG, 40)) == 300
    fixed = TransferTuner("rsync://archive/data", least=100, most=100, enabled=False)
    assert set(run(fixed, LONG, 40)) == {100}
    assert fixed.last is None


def test_batches_never_grow_past_what_their_bytes_let_them_hold() -> None:
    # Files of 500 KB, batches cut at 64 MiB: at most 134 of them fit, whatever the link would want.
    tuner = TransferTuner("rsync://archive/data", least=20, most=1000, most_bytes=64 << 20)
    rng = random.Random(1)
    for _ in range(40):
        files = tuner.batch_size
        size = files * 500_000
        tuner.observe((7 * 0.15 + size / (50e6 / 4)) * rng.uniform(0.95, 1.05), size, files)
    assert 20 < tuner.batch_size <= (64 << 20) // 500_000


def test_calls_of_empty_files_say_nothing_of_the_link() -> None:
    tuner = TransferTuner("rsync://archive/data", least=100, most=1000)
    for _ in range(10):
        assert tuner.observe(1.2, 0, 100) is None
    assert tuner.batch_size == 100 and tuner.last_fit is None


def test_a_far_destinations_greeting_starts_the_batches_at_the_most_where_they_stay() -> None:
    tuner = TransferTuner("rsync://archive/data", least=100, most=1000)
    decision = tuner.greeted(2 * LONG.round_trip)
    assert decision is not None and tuner.batch_size == 1000
    assert decision.reason == ("the destination greeted in 300 ms: each call's round trips take about 1.1 s, so "
                               "batches start at the most")
    assert set(run(tuner, LONG, 20)) == {1000}, "calls of one size, mostly round trips: no smaller one to measure"
    assert tuner.status()["round_trip_seconds"] == LONG.round_trip


def test_a_near_destinations_greeting_leaves_the_batches_to_their_calls() -> None:
    tuner = TransferTuner("rsync://valley/data", least=100, most=1000)
    assert tuner.greeted(2 * LAN.round_trip) is None
    assert tuner.batch_size == 100
    assert max(run(tuner, LAN, 200)) <= 200


def test_the_greeting_of_a_link_that_has_changed_is_forgotten() -> None:
    tuner = TransferTuner("rsync://archive/data", least=100, most=1000)
    tuner.greeted(2 * LONG.round_trip)
    sizes = run(tuner, LAN, 60)
    assert tuner.round_trip is None, "calls quicker than the greeting's round trips: the link is not that far now"
    assert sizes[-1] < 1000


def test_no_greeting_and_batches_of_a_fixed_size_start_where_they_are() -> None:
    tuner = TransferTuner("rsync://archive/data", least=100, most=1000)
    assert tuner.greeted(None) is None and tuner.batch_size == 100
    fixed = TransferTuner("rsync://archive/data", least=100, most=1000, enabled=False)
    assert fixed.greeted(2 * LONG.round_trip) is None and fixed.batch_size == 100


def test_batches_started_at_the_most_come_down_to_what_their_bytes_hold() -> None:
    # Files of 10 MB, batches cut at 64 MiB: six of them in each, whatever the greeting said.
    tuner = TransferTuner("rsync://archive/data", least=4, most=1000, most_bytes=64 << 20)
    tuner.greeted(2 * LONG.round_trip)
    assert tuner.batch_size == 1000
    decision = tuner.observe(7 * LONG.round_trip + 60e6 / 50e6, 60_000_000, 6)
    assert decision is not None and tuner.batch_size == 6
    assert decision.reason == "batches are cut by their bytes at about 6 records of 10000000 bytes"


def test_a_greeting_is_forgotten_after_a_horizon_of_calls() -> None:
    # Calls of 1,000 files that the greeting's round trips take most of, then many more of the same.
    tuner = TransferTuner("rsync://archive/data", least=100, most=1000)
    tuner.greeted(2 * LONG.round_trip)
    run(tuner, LONG, HORIZON)
    assert tuner.round_trip is not None and tuner.batch_size == 1000
    run(tuner, LONG, 2 * SETTLE)
    assert tuner.round_trip is None, "a greeting slowed by chance must not keep the batches at the most for good"
