"""A destination's windows: the times of day it is used, over midnight too, and the errors of windows given
wrong."""

from __future__ import annotations

import time

import pytest

from dataq.windows import Windows, check_windows


def at(clock: str) -> float:
    """Today's local time ``HH:MM[:SS]`` as a wall-clock time."""
    parts = [int(part) for part in clock.split(":")] + [0]
    today = time.localtime()
    return time.mktime((today.tm_year, today.tm_mon, today.tm_mday, parts[0], parts[1], parts[2], 0, 0, -1))


def test_no_windows_means_always() -> None:
    always = Windows.parse([])
    assert always.always and always.open_at(at("03:00")) and always.opens(at("03:00")) == at("03:00")
    assert always.describe() == "always"


def test_a_window_is_open_from_its_start_up_to_its_end() -> None:
    lunch = Windows.parse(["12:00-13:30"])
    assert not lunch.open_at(at("11:59:59")) and lunch.open_at(at("12:00")) and lunch.open_at(at("13:29:59"))
    assert not lunch.open_at(at("13:30"))
    assert lunch.opens(at("11:00")) == at("12:00")
    # Tomorrow at 12:00: 22 hours on (an hour more or less the day the clock changes).
    assert 21 * 3600 <= lunch.opens(at("14:00")) - at("14:00") <= 23 * 3600


def test_a_window_over_midnight_and_one_to_the_end_of_the_day() -> None:
    night = Windows.parse(["19:00-07:00", "12:00:30-12:01"])
    assert night.open_at(at("23:00")) and night.open_at(at("06:59")) and not night.open_at(at("07:00"))
    assert night.open_at(at("12:00:45")) and not night.open_at(at("12:00:15"))
    assert night.opens(at("08:00")) == at("12:00:30")
    assert night.opens(at("13:00")) == at("19:00")
    assert night.describe() == "19:00-07:00, 12:00:30-12:01"
    assert Windows.parse(["22:00-24:00"]).open_at(at("23:59:59"))
    assert Windows.parse(["00:00-24:00"]).open_at(at("05:00"))


@pytest.mark.parametrize(("windows", "words"), [
    (["7-19"], "'7' is not a time of day HH:MM"),
    (["07:00"], "is not \"HH:MM-HH:MM\""),
    (["07:00-25:00"], "'25:00' is not a time of day (00:00 to 24:00)"),
    (["07:60-08:00"], "'07:60' is not a time of day"),
    (["08:00-08:00"], "starts where it ends"),
    (["19:00-07:00", "06:00-08:00"], "windows '19:00-07:00' and '06:00-08:00' overlap"),
    (["09:00-12:00", "11:00-11:30"], "overlap"),
    ("19:00-07:00", "must be a list"),
])
def test_windows_given_wrong_are_refused_saying_which_and_why(windows: list[str], words: str) -> None:
    with pytest.raises(ValueError, match=r"^windows") as refused:
        check_windows(windows)
    assert words in str(refused.value)


def test_windows_that_touch_do_not_overlap() -> None:
    check_windows(["07:00-12:00", "12:00-13:00", "13:00-07:00"])
