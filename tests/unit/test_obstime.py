"""When an observation was taken, read from every form of DATE-OBS, TIME-OBS and MJD-OBS archives hold."""

from __future__ import annotations

import datetime as dt

import pytest

from dataq.actions.archive.obstime import MJD_EPOCH, observation_time


def utc(*parts: int, micro: int = 0) -> dt.datetime:
    return dt.datetime(*parts, microsecond=micro, tzinfo=dt.UTC)  # type: ignore[misc]


@pytest.mark.parametrize(("date_obs", "time_obs", "expected"), [
    ("2014-07-08T03:12:45.5", None, utc(2014, 7, 8, 3, 12, 45, micro=500_000)),
    ("2014-07-08T03:12:45.5Z", None, utc(2014, 7, 8, 3, 12, 45, micro=500_000)),
    ("2014-07-08 03:12", None, utc(2014, 7, 8, 3, 12)),
    ("  2014-07-08T03:12:45  ", "23:00:00", utc(2014, 7, 8, 3, 12, 45)),  # its own time of day wins
    ("2014-07-08", "03:12:45.25", utc(2014, 7, 8, 3, 12, 45, micro=250_000)),
    ("1998-04-20", "18:38:15", utc(1998, 4, 20, 18, 38, 15)),
    ("19/05/94", "15:41:16", utc(1994, 5, 19, 15, 41, 16)),  # WFPC2: DD/MM/YY, the 20th century only
    ("31/12/99", None, utc(1999, 12, 31)),
    ("2014-07-08", None, utc(2014, 7, 8)),
    ("2016-12-31", "23:59:60", utc(2017, 1, 1)),  # a leap second is a real time of day
])
def test_date_obs_in_every_form_gives_one_utc_instant_and_its_mjd(date_obs: str, time_obs: str | None,
                                                                  expected: dt.datetime) -> None:
    when, mjd, problems = observation_time(date_obs, time_obs, None)
    assert (when, problems) == (expected, [])
    assert mjd == pytest.approx((expected - MJD_EPOCH).total_seconds() / 86_400, abs=1e-9)


def test_mjd_obs_alone_gives_the_time_and_is_kept_as_the_header_says() -> None:
    when, mjd, problems = observation_time(None, None, 49491.65366175)
    assert when is not None and when.replace(microsecond=0) == utc(1994, 5, 19, 15, 41, 16)
    assert (mjd, problems) == (49491.65366175, [])
    assert observation_time(None, None, 0.0)[0] == MJD_EPOCH


def test_a_header_with_both_keeps_its_mjd_and_takes_the_time_from_date_obs() -> None:
    assert observation_time("2011-09-16T10:33:45.368", None, 55820.0) == \
        (utc(2011, 9, 16, 10, 33, 45, micro=368_000), 55820.0, [])


@pytest.mark.parametrize(("date_obs", "time_obs", "problem"), [
    ("yesterday", None, "DATE-OBS: 'yesterday' is neither YYYY-MM-DD[Thh:mm:ss] nor DD/MM/YY"),
    ("2014-13-01", None, "DATE-OBS: '2014-13-01' is not a date (month must be in 1..12)"),
    ("31/02/94", None, "DATE-OBS: '31/02/94' is not a date"),
    ("2014-07-08T25:00:00", None, "DATE-OBS: '2014-07-08T25:00:00' is not a time of day"),
    ("2014-07-08", "noon", "TIME-OBS: 'noon' is not hh:mm[:ss]"),
    ("2014-07-08", "12:75", "TIME-OBS: '12:75' is not a time of day"),
])
def test_a_date_that_is_none_is_named_with_its_text_and_falls_back_to_mjd_obs(date_obs: str, time_obs: str | None,
                                                                             problem: str) -> None:
    when, mjd, problems = observation_time(date_obs, time_obs, None)
    assert (when, mjd) == (None, None)
    assert len(problems) == 1 and problems[0].startswith(problem)
    fallback, _, _ = observation_time(date_obs, time_obs, 56846.5)
    assert fallback == utc(2014, 7, 8, 12)


def test_other_time_scales_are_converted_to_utc() -> None:
    # TT runs 32.184 s ahead of TAI, and TAI 36 s ahead of UTC in 2016.
    when, _, problems = observation_time("2016-01-26T17:58:29", None, None, "TT")
    assert problems == [] and when == utc(2016, 1, 26, 17, 57, 20, micro=816_000)
    assert observation_time("2016-01-26T17:58:29", None, None, "TAI")[0] == utc(2016, 1, 26, 17, 57, 53)
    assert observation_time("2016-01-26T17:58:29", None, None, "GPS")[0] == utc(2016, 1, 26, 17, 58, 12)
    assert observation_time("2016-01-26T17:58:29", None, None, " utc ")[0] == utc(2016, 1, 26, 17, 58, 29)


def test_an_unknown_time_scale_is_named_and_the_time_taken_as_utc() -> None:
    when, _, problems = observation_time("2016-01-26T17:58:29", None, None, "MARS")
    assert when == utc(2016, 1, 26, 17, 58, 29)
    assert problems == ["TIMESYS: 'MARS' is not a time scale dataq knows; the time is taken as UTC"]


def test_nothing_to_go_on_is_no_time_and_no_problem() -> None:
    assert observation_time(None, "12:00:00", None) == (None, None, [])


def test_old_names_of_time_scales_are_understood() -> None:
    tt = observation_time("2016-01-26T17:58:29", None, None, "TT")[0]
    assert observation_time("2016-01-26T17:58:29", None, None, "TDT")[0] == tt
    assert observation_time("2016-01-26T17:58:29", None, None, "ET")[0] == tt
    assert observation_time("2016-01-26T17:58:29", None, None, "IAT")[0] == utc(2016, 1, 26, 17, 57, 53)


def test_a_computed_mjd_is_in_the_headers_time_scale_as_mjd_obs_would_be() -> None:
    when, mjd, _ = observation_time("2016-01-26T00:00:00", None, None, "TAI")
    assert mjd == 57413.0 and when == utc(2016, 1, 25, 23, 59, 24)


def test_an_mjd_that_is_no_date_is_named() -> None:
    assert observation_time(None, None, 1e12) == (None, 1e12, ["MJD-OBS: 1000000000000.0 is not a date"])
