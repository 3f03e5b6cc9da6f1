"""Windows: the times of day when a destination is used at all (an action's option ``windows``).

Each window is ``"HH:MM-HH:MM"`` (or with seconds, ``"HH:MM:SS-HH:MM:SS"``) in the machine's local time, from its
start up to (not including) its end; one whose end comes before its start runs over midnight
(``"19:00-07:00"``). No windows: the destination is always used. Outside every window a destination's records
wait, as in an outage, without counting as failures; what runs when a window closes is not interrupted.

Windows follow the local clock: on the day a daylight-saving change moves it, the next opening moves with it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

DAY = 86_400


@dataclass(frozen=True, slots=True)
class Window:
    """From ``start`` up to ``end``, in seconds since local midnight (``end <= start``: over midnight)."""

    start: int
    end: int

    def spans(self, second: int) -> bool:
        if self.start < self.end:
            return self.start <= second < self.end
        return second >= self.start or second < self.end

    def describe(self) -> str:
        return f"{_clock(self.start)}-{_clock(self.end)}"


@dataclass(frozen=True, slots=True)
class Windows:
    """A destination's windows (none: always open)."""

    windows: tuple[Window, ...] = ()

    @classmethod
    def parse(cls, texts: Sequence[str]) -> Windows:
        """The windows of ``texts``; ValueError naming the one that does not parse, or two that overlap."""
        windows = tuple(_window(text) for text in texts)
        for index, window in enumerate(windows):
            for other in windows[:index]:
                if _overlap(window, other):
                    raise ValueError(f"windows {other.describe()!r} and {window.describe()!r} overlap: give each "
                                     "time of day once")
        return cls(windows)

    @property
    def always(self) -> bool:
        return not self.windows

    def open_at(self, when: float) -> bool:
        """Whether the destination is used at ``when`` (a wall-clock time)."""
        return self.always or any(window.spans(_second_of_day(when)) for window in self.windows)

    def opens(self, when: float) -> float:
        """When the destination is next used, from ``when`` on (``when`` itself if it is used then)."""
        if self.open_at(when):
            return when
        return min(_next_clock(when, window.start) for window in self.windows)

    def describe(self) -> str:
        return "always" if self.always else ", ".join(window.describe() for window in self.windows)


def check_windows(texts: Sequence[str]) -> None:
    """For an action's options: ValueError saying what is wrong with its ``windows``."""
    if isinstance(texts, str):
        raise ValueError(f"windows must be a list of \"HH:MM-HH:MM\" strings, got the string {texts!r}")
    try:
        Windows.parse(texts)
    except ValueError as exc:
        raise ValueError(f"windows: {exc}") from None


def _window(text: str) -> Window:
    if not isinstance(text, str):
        raise ValueError(f"a window must be a string \"HH:MM-HH:MM\", got {text!r}")
    start, dash, end = text.partition("-")
    if not dash:
        raise ValueError(f"window {text!r} is not \"HH:MM-HH:MM\" (from, a dash, to)")
    first, last = _seconds(start, text) % DAY, _seconds(end, text)
    if first == last:
        raise ValueError(f"window {text!r} starts where it ends: leave windows out to use the destination always")
    return Window(first, last)


def _seconds(clock: str, text: str) -> int:
    parts = clock.strip().split(":")
    try:
        if len(parts) not in (2, 3) or not all(part.isdigit() and len(part) == 2 for part in parts):
            raise ValueError
        hour, minute, second = (int(part) for part in (*parts, "00")[:3])
    except ValueError:
        raise ValueError(f"window {text!r}: {clock.strip()!r} is not a time of day HH:MM or HH:MM:SS") from None
    if hour > 24 or minute > 59 or second > 59 or (hour == 24 and (minute or second)):
        raise ValueError(f"window {text!r}: {clock.strip()!r} is not a time of day (00:00 to 24:00)")
    return (hour * 3600 + minute * 60 + second) % DAY if hour < 24 else DAY


def _overlap(one: Window, other: Window) -> bool:
    """Two spans of a circle overlap when one holds the other's start."""
    return one.spans(other.start) or other.spans(one.start)


def _second_of_day(when: float) -> int:
    local = time.localtime(when)
    return local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec


def _next_clock(when: float, second: int) -> float:
    """The first wall-clock time after ``when`` at which the local clock reads ``second`` past midnight (on the day
    the clock changes, that day's own reading: no fixed 86,400 s)."""
    local = time.localtime(when)
    hour, rest = divmod(second % DAY, 3600)
    for days in range(3):
        at = time.mktime((local.tm_year, local.tm_mon, local.tm_mday + days, hour, rest // 60, rest % 60, 0, 0, -1))
        if at > when:
            return at
    return when + DAY


def _clock(second: int) -> str:
    hours, rest = divmod(second, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}" + (f":{seconds:02d}" if seconds else "")
