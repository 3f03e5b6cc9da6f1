"""A queue's activities: the tables ``[queues.NAME.activities.ACTIVITY]``, which decide what runs first
(:mod:`dataq.activities` turns them into a plan; the store's scripts serve it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dataq.config.loader import FILLED, ROLE_KEY, Invalid, Section, setting
from dataq.keys import ACTIVITY_PATTERN, DEFAULT_ACTIVITY

MAX_ACTIVITIES = 32
"""Activities a queue may define: each is a list every claim looks at, so they must stay few."""
_GLOB_STARTS = ("/", "*", "?", "[")
"""How a glob that can match an absolute path starts."""


@dataclass(frozen=True, slots=True)
class ActivitySettings(Section):
    """One activity of a queue: which records are in it, and how it is served."""

    name: str = field(metadata={ROLE_KEY: FILLED})
    """The table's name: 1 to 32 letters, digits, ``_``, ``-`` or ``.``."""
    match: tuple[str, ...] = ()
    """Globs on a record's path (``*`` also crosses ``/``): a record whose feeder names no activity is in the first
    activity, in the order of the settings file, with a glob that fits its path. Empty: named by feeders only."""
    strict: bool = False
    """Served before every shared activity, strict activities in the order of the settings file (a backlog of a
    strict activity holds every shared one back until it is done)."""
    share: int | None = setting(None, ge=1)
    """The weight of a shared activity: the pop daemon's claims go to the shared activities that have records
    queued in proportion to their shares (None: 1). A strict activity has none."""

    def _check(self) -> None:
        if ACTIVITY_PATTERN.fullmatch(self.name) is None:
            raise Invalid("name", f"activity name {self.name!r} is invalid: use 1 to 32 letters, digits, _, - or .")
        object.__setattr__(self, "match", tuple(self.match))
        for glob in self.match:
            if not glob.startswith(_GLOB_STARTS):
                raise Invalid("match", f"key '{{key}}': glob {glob!r} can never match: a record's path is absolute, "
                              "so a glob starts with /, *, ? or [")
            if any(character in glob for character in "\0\n"):
                raise Invalid("match", f"key '{{key}}': glob {glob!r} holds a NUL or a newline, which no path has")
        if self.strict and self.share is not None:
            raise Invalid("share", "key '{key}': a strict activity is served before every share and has none; "
                          "drop 'share' or 'strict'")
        if self.name == DEFAULT_ACTIVITY and self.match:
            raise Invalid("match", f"key '{{key}}': activity {DEFAULT_ACTIVITY!r} holds what no other activity "
                          "matches and has no globs of its own")

    @property
    def weight(self) -> int:
        """The share, 1 when not set; 0 for a strict activity."""
        return 0 if self.strict else (self.share or 1)
