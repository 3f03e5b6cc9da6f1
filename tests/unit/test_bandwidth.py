"""A destination's bandwidth: one limit, or a timetable in rclone's form, and the errors of one given wrong."""

from __future__ import annotations

import time

import pytest

from dataq.bandwidth import Bandwidth, check_bandwidth


def at(clock: str) -> float:
    hour, minute = (int(part) for part in clock.split(":"))
    today = time.localtime()
    return time.mktime((today.tm_year, today.tm_mon, today.tm_mday, hour, minute, 0, 0, 0, -1))


def test_one_rate_holds_at_all_times_in_kib_unless_a_unit_says() -> None:
    assert Bandwidth.parse("10M").at(at("03:00")) == 10 * 1024 ** 2
    assert Bandwidth.parse("512").at(at("15:00")) == 512 * 1024
    assert Bandwidth.parse("1.5G").at(at("15:00")) == int(1.5 * 1024 ** 3)
    assert Bandwidth.parse("2000B").at(at("15:00")) == 2000
    assert Bandwidth.parse("off").at(at("15:00")) is None


def test_a_timetable_sets_each_limit_until_the_next_entry_and_the_last_runs_over_midnight() -> None:
    table = Bandwidth.parse("08:00,512k 19:00,10M 23:00,off")
    assert table.at(at("07:59")) is None, "from 23:00 yesterday"
    assert table.at(at("08:00")) == 512 * 1024
    assert table.at(at("18:59")) == 512 * 1024
    assert table.at(at("19:00")) == 10 * 1024 ** 2
    assert table.at(at("23:30")) is None
    assert Bandwidth.parse("19:00,1M 08:00,off").at(at("20:00")) == 1024 ** 2, "given in any order"


@pytest.mark.parametrize(("text", "words"), [
    ("fast", "'fast' is not a rate"),
    ("-1M", "is not a rate"),
    ("0", "is not a rate"),
    ("8:00,1M", "'8:00,1M' is not HH:MM,RATE"),
    ("08:00 1M", "is not HH:MM,RATE"),
    ("25:00,1M", "is not HH:MM,RATE"),
    ("08:00,1M 08:00,off", "08:00 is given twice"),
    ("", "must be a rate"),
])
def test_a_bandwidth_given_wrong_is_refused_saying_what(text: str, words: str) -> None:
    with pytest.raises(ValueError, match="bandwidth") as refused:
        check_bandwidth(text)
    assert words in str(refused.value)
