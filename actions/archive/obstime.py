"""When an observation was taken, as one UTC instant, from the forms FITS headers write it in.

Headers say it in several ways, and an archive of thirty years holds all of them:

- ``DATE-OBS = '2014-07-08T03:12:45.5'`` (ISO 8601, the FITS standard since 1997; a trailing ``Z`` is allowed);
- ``DATE-OBS = '2014-07-08'`` with the time of day in ``TIME-OBS`` (or ``UT``), as NOAO and HST headers do;
- ``DATE-OBS = '19/05/94'``, the original FITS form ``DD/MM/YY``, valid for 1900-1999 only (WFPC2 headers), with
  ``TIME-OBS`` beside it;
- only ``MJD-OBS``, a Modified Julian Date.

:func:`observation_time` turns these into ``obs_time`` (an aware UTC datetime) and ``mjd_obs``, whichever of the two
the header lacks being computed from the other. ``TIMESYS`` other than UTC (``TT``, ``TAI``, ...) is converted with
astropy's time scales. A date without a time of day is taken as 00:00 of that day. What cannot be read is said, so
the catalog keeps the header's own text and the reason.

No pyspark here: this module is shipped by value to Spark executors with :mod:`.headers`.
"""

from __future__ import annotations

import datetime as dt
import re

MJD_EPOCH = dt.datetime(1858, 11, 17, tzinfo=dt.UTC)
SECONDS_PER_DAY = 86_400.0
UTC_NAMES = frozenset({"UTC", "UT", "GMT", "Z"})
"""TIMESYS values meaning UTC already (``UT`` is what old headers wrote for it)."""
GPS_MINUS_TAI = dt.timedelta(seconds=-19)
"""GPS time runs a fixed 19 s behind TAI; astropy has no GPS scale for FITS's ``TIMESYS = 'GPS'``."""
ASTROPY_SCALES = frozenset({"TAI", "TT", "TDB", "TCG", "TCB", "UT1"})
SCALE_ALIASES = {"TDT": "TT", "ET": "TT", "IAT": "TAI"}
"""Older names FITS headers use (FITS 4.0, table 30: TDT and ET are TT, IAT is TAI)."""

_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}(?:\.\d*)?))?)?Z?")
_OLD = re.compile(r"(\d{2})/(\d{2})/(\d{2})")
_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d*)?))?")

Observed = tuple[dt.datetime | None, float | None, list[str]]
"""(obs_time, mjd_obs, problems)."""


def observation_time(date_obs: str | None, time_obs: str | None, mjd_obs: float | None,
                     timesys: str | None = None) -> Observed:
    """``obs_time`` from DATE-OBS (with TIME-OBS when DATE-OBS has no time of day), else from MJD-OBS; ``mjd_obs``
    as the header gives it, else from ``obs_time``. Problems name the keyword and its text."""
    problems: list[str] = []
    system = (timesys or "UTC").strip().upper() or "UTC"
    known_system = system in UTC_NAMES or system in ASTROPY_SCALES or system in SCALE_ALIASES or system == "GPS"
    if not known_system:
        problems.append(f"TIMESYS: {timesys!r} is not a time scale dataq knows; the time is taken as UTC")
    when: dt.datetime | None = None
    if date_obs is not None:
        try:
            when = _parse_date(date_obs, time_obs)
        except ValueError as exc:
            problems.append(str(exc))
    if when is None and mjd_obs is not None:
        try:
            when = MJD_EPOCH + dt.timedelta(days=mjd_obs)
        except (OverflowError, ValueError):  # far outside datetime's years, or NaN
            problems.append(f"MJD-OBS: {mjd_obs!r} is not a date")
    if mjd_obs is None and when is not None:
        # In the header's time scale, as MJD-OBS would have been (FITS 4.0, section 9.2).
        mjd_obs = (when - MJD_EPOCH).total_seconds() / SECONDS_PER_DAY
    system = SCALE_ALIASES.get(system, system)
    if when is not None and known_system and system not in UTC_NAMES:
        try:
            when = _to_utc(when, system)
        except Exception as exc:  # astropy refuses some instants (far outside its tables); keep the header's
            problems.append(f"TIMESYS: cannot convert {when:%Y-%m-%dT%H:%M:%S} {system} to UTC ({exc}); "
                            "the time is taken as UTC")
    return when, mjd_obs, problems


def _parse_date(date_obs: str, time_obs: str | None) -> dt.datetime:
    """The instant DATE-OBS names, in the header's time scale (a naive reading of its digits, marked UTC)."""
    text = date_obs.strip()
    iso = _ISO.fullmatch(text)
    if iso is not None:
        year, month, day, hour, minute, second = iso.groups()
        date = _date(int(year), int(month), int(day), date_obs)
        if hour is not None:
            return _at(date, int(hour), int(minute), float(second or 0), "DATE-OBS", date_obs)
    else:
        old = _OLD.fullmatch(text)
        if old is None:
            raise ValueError(f"DATE-OBS: {date_obs!r} is neither YYYY-MM-DD[Thh:mm:ss] nor DD/MM/YY")
        day, month, year = (int(part) for part in old.groups())
        date = _date(1900 + year, month, day, date_obs)  # the old form was for the 20th century only
    if time_obs is None or not time_obs.strip():
        return dt.datetime.combine(date, dt.time(), dt.UTC)
    clock = _TIME.fullmatch(time_obs.strip())
    if clock is None:
        raise ValueError(f"TIME-OBS: {time_obs!r} is not hh:mm[:ss]")
    hour, minute, second = clock.groups()
    return _at(date, int(hour), int(minute), float(second or 0), "TIME-OBS", time_obs)


def _date(year: int, month: int, day: int, text: str) -> dt.date:
    try:
        return dt.date(year, month, day)
    except ValueError as exc:
        raise ValueError(f"DATE-OBS: {text!r} is not a date ({exc})") from None


def _at(date: dt.date, hour: int, minute: int, second: float, keyword: str, text: str) -> dt.datetime:
    # Up to 60 s: a leap second is a real time of day; the addition carries it into the next minute.
    if hour > 23 or minute > 59 or second >= 61:
        raise ValueError(f"{keyword}: {text!r} is not a time of day")
    return dt.datetime.combine(date, dt.time(hour, minute), dt.UTC) + dt.timedelta(seconds=second)


def _to_utc(when: dt.datetime, system: str) -> dt.datetime:
    """``when`` (read in the time scale ``system``) as UTC."""
    if system == "GPS":
        when, system = when - GPS_MINUS_TAI, "TAI"
    from astropy.time import Time  # only headers in another time scale pay for the import
    from astropy.utils import iers

    iers.conf.auto_download = False  # an executor may be offline: the tables astropy ships are enough here
    converted: dt.datetime = Time(when.replace(tzinfo=None), scale=system.lower()).utc.to_datetime()
    return converted.replace(tzinfo=dt.UTC)
