"""A queue's activities as the store serves them: their order, weights and globs, from the settings."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from dataq.config.activity_settings import ActivitySettings
from dataq.config.queue_settings import QueueSettings
from dataq.keys import DEFAULT_ACTIVITY
from dataq.record import Record


@dataclass(frozen=True, slots=True)
class Activity:
    """One activity: its name, its weight (0: strict, served before every share) and its globs."""

    name: str
    weight: int = 1
    match: tuple[str, ...] = ()

    @property
    def strict(self) -> bool:
        return self.weight == 0


@dataclass(frozen=True, slots=True)
class Plan:
    """The activities of one queue.

    ``activities`` holds them in the order of the settings file, ``default`` first when the settings do not define
    it. :attr:`served` is the order the claim script looks at them: the strict ones in settings order, then the
    shared ones."""

    activities: tuple[Activity, ...] = (Activity(DEFAULT_ACTIVITY),)
    _globs: tuple[tuple[str, re.Pattern[str]], ...] = field(init=False, repr=False, compare=False)
    _indexes: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [activity.name for activity in self.activities]
        if DEFAULT_ACTIVITY not in names:
            raise ValueError(f"a plan serves activity {DEFAULT_ACTIVITY!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"an activity named twice in {names}")
        # One regular expression per activity: a record is matched against each activity once, not each glob.
        globs = tuple((activity.name, re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in activity.match)))
                      for activity in self.activities if activity.match)
        object.__setattr__(self, "_globs", globs)
        named = [name for name in names if name != DEFAULT_ACTIVITY]
        object.__setattr__(self, "_indexes", {name: number for number, name in enumerate(named, start=1)})

    @classmethod
    def of(cls, activities: Mapping[str, ActivitySettings]) -> Plan:
        found = [Activity(a.name, a.weight, a.match) for a in activities.values()]
        if DEFAULT_ACTIVITY not in activities:
            found.insert(0, Activity(DEFAULT_ACTIVITY))
        return cls(tuple(found))

    @property
    def single(self) -> bool:
        """Only ``default``: one list, nothing to choose (the scripts then skip every activity step)."""
        return len(self.activities) == 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(activity.name for activity in self.activities)

    @property
    def named(self) -> tuple[str, ...]:
        """Every activity but ``default``, in settings order: the lists beyond ``active`` the scripts are given."""
        return tuple(name for name in self.names if name != DEFAULT_ACTIVITY)

    @property
    def names_in_lists(self) -> tuple[str, ...]:
        """``default``, then :attr:`named`: the order of the scripts' blocks of keys per activity."""
        return (DEFAULT_ACTIVITY, *self.named)

    @property
    def served(self) -> tuple[Activity, ...]:
        """The order a claim looks at the activities: strict ones first, in settings order, then the shares."""
        return tuple(a for a in self.activities if a.strict) + tuple(a for a in self.activities if not a.strict)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def assign(self, path: str) -> str:
        """The activity of a record its feeder named none for: the first whose globs fit its path."""
        for name, pattern in self._globs:
            if pattern.match(path) is not None:
                return name
        return DEFAULT_ACTIVITY

    def resolve(self, items: Sequence[tuple[Record, str]]) -> list[tuple[Record, str]]:
        """Each record with the activity it is queued in: the one it names if this plan serves it, else the first
        whose globs fit its path, else ``default`` (None: stored as a record of no activity is)."""
        resolved = []
        names = self.names
        for record, source in items:
            named = record.activity if record.activity in names else self.assign(record.path)
            activity = None if named == DEFAULT_ACTIVITY else named
            resolved.append((record if activity == record.activity else replace(record, activity=activity), source))
        return resolved

    def index(self, name: str) -> int:
        """Where an activity's list is among the lists the scripts are given (0: ``default``'s ``active``); an
        activity this plan does not serve is ``default``'s."""
        return self._indexes.get(name, 0)

    def codes(self, activities: Iterable[str | None]) -> str:
        """One character per record naming its list for a script (:meth:`index` as ``'0'`` + index), or ``''``
        when every record is ``default``'s: the common case, with nothing to split."""
        if self.single:
            return ""
        codes = "".join(chr(48 + self.index(name or DEFAULT_ACTIVITY)) for name in activities)
        return "" if codes.count("0") == len(codes) else codes


def plan_for(queue: QueueSettings) -> Plan:
    """The plan of a queue's settings."""
    return Plan.of(queue.activities)
