"""Bandwidth: the most a destination's transfers may take of a link, at all times or by a timetable (an action's
option ``bandwidth``, in rclone's form).

``"10M"`` is a limit at all times; ``"08:00,512K 19:00,10M 23:00,off"`` is a timetable: each entry sets the limit
from its time of day (local) until the next entry's, the last one's running over midnight to the first's. A rate
is a number with a unit, ``B`` (bytes), ``K`` (KiB, the unit when none is given), ``M`` (MiB) or ``G`` (GiB), per
second; ``off`` is no limit.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from dataq.windows import DAY

UNITS = {"b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
_RATE = re.compile(r"(\d+(?:\.\d+)?)([bkmg]?)", re.IGNORECASE)
_CLOCK = re.compile(r"(\d{2}):(\d{2})")


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """Limits by time of day: (second since local midnight, bytes per second or None for none), in time order."""

    entries: tuple[tuple[int, int | None], ...]

    @classmethod
    def parse(cls, text: str) -> Bandwidth:
        """The limits ``text`` gives; ValueError saying what does not parse."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"bandwidth must be a rate (\"10M\") or a timetable (\"08:00,512K 19:00,off\"), "
                             f"got {text!r}")
        parts = text.split()
        if len(parts) == 1 and "," not in parts[0]:
            return cls(((0, _rate(parts[0], text)),))
        entries: dict[int, int | None] = {}
        for part in parts:
            clock, comma, rate = part.partition(",")
            match = _CLOCK.fullmatch(clock)
            if not comma or match is None or int(match[1]) > 23 or int(match[2]) > 59:
                raise ValueError(f"bandwidth {text!r}: {part!r} is not HH:MM,RATE")
            second = int(match[1]) * 3600 + int(match[2]) * 60
            if second in entries:
                raise ValueError(f"bandwidth {text!r}: {clock} is given twice")
            entries[second] = _rate(rate, text)
        return cls(tuple(sorted(entries.items())))

    def at(self, when: float) -> int | None:
        """The limit at ``when`` in bytes per second (None: no limit)."""
        local = time.localtime(when)
        second = (local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec) % DAY
        current = self.entries[-1][1]  # before the first entry of the day: the last one's, from yesterday
        for start, rate in self.entries:
            if start <= second:
                current = rate
        return current


def check_bandwidth(text: str | None) -> None:
    """For an action's options: ValueError saying what is wrong with its ``bandwidth``."""
    if text is not None:
        Bandwidth.parse(text)


def _rate(text: str, whole: str) -> int | None:
    if text.lower() == "off":
        return None
    match = _RATE.fullmatch(text)
    if match is None or float(match[1]) <= 0:
        raise ValueError(f"bandwidth {whole!r}: {text!r} is not a rate (a positive number and B, K, M or G) or off")
    return max(1, int(float(match[1]) * UNITS[(match[2] or "k").lower()]))
