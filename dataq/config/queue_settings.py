"""The settings of one queue: the table ``[queues.NAME]``, with a sub-table of options per action."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dataq.addresses import MAX_PORT
from dataq.checksum import DEFAULT_ALGORITHM, check_queue_algorithm
from dataq.config.activity_settings import MAX_ACTIVITIES, ActivitySettings
from dataq.config.loader import FILLED, ROLE_KEY, SUB_TABLES, Invalid, Section, freeze, setting
from dataq.errors import InvalidRecord
from dataq.keys import DEFAULT_ACTIVITY, QUEUE_NAME_PATTERN
from dataq.record import RecordRules, pattern_for

DEFAULT_REMEMBER_DONE = 7 * 86_400.0
"""Seconds a done record's id is remembered (7 days, as Rubin's transfer keeps its de-duplication keys)."""
DEFAULT_SEARCH_NAMES = 100_000
"""Names of pushed records kept for the console's search, at least (a day of a busy instrument's files)."""
SOURCE_CHECKS = ("identity", "read")
"""The values of ``source_check``."""
ACTION_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}(:[A-Za-z0-9_.:-]{1,256})?")
"""An entry of a queue's ``actions``: a name (``echo``), a name with an inline argument (``sleep:0.5``), or an
import path ``module:Class`` (with an optional ``:argument``)."""


@dataclass(frozen=True, slots=True)
class QueueSettings(Section):
    """One queue: the table ``[queues.NAME]``, with a sub-table of options per action."""

    name: str = field(metadata={ROLE_KEY: FILLED})
    """The table's name: 1 to 64 letters, digits, ``_``, ``-`` or ``.``."""
    actions: tuple[str, ...] = ("echo",)
    """Actions run on each record, in order."""
    max_errors: int = setting(0, ge=0)
    """Failures tolerated before a record goes inactive (0: no retry, as in the 2014 data-q)."""
    max_queue_size: int = setting(1_000_000, ge=1)
    """Active records above which the push daemon turns ``read`` off."""
    retry_delay: float = setting(0.0, ge=0)
    """Seconds a failed record waits before it runs again the first time (0: at once)."""
    retry_backoff: float = setting(2.0, ge=1)
    """Each further failure of a record multiplies its wait by this."""
    retry_max_delay: float = setting(3600.0, gt=0)
    """Longest wait of a failed record before it runs again (the waits are also shortened by up to a fifth, at
    random, so records failed together do not fall due together)."""
    action_timeout: float = setting(600.0, gt=0)
    """Seconds one action may run on one record before it counts as failed."""
    checksum: str = DEFAULT_ALGORITHM
    """The algorithm of the records' checksums: ``md5``, ``sha256`` or ``xxh128`` (XXH3-128; not adler32: a
    checksum is the record's id, and 32 bits collide). The
    feeders compute it, the push daemon checks it, the actions verify with it, and a cascade's hand-on names it
    (a next site whose queue uses another refuses the record)."""
    checksum_pattern: str | None = None
    """Regular expression every checksum must match in full (None: lower-case hex of the width of ``checksum``'s
    digests, such as ``[0-9a-f]{32}`` for md5)."""
    source_check: str = "identity"
    """How an action proves that a record's file holds the record's checksum before it sends, stores or removes
    it. ``"identity"``: a record whose feeder (``dataq feed``) sent the identity of the file it hashed, a file
    that had not changed for a second before, is proven when the file still has that identity (device, inode,
    size, modification and change time: any write changes one), without reading it again; every other record's
    file is read and hashed. ``"read"``: every file is read and hashed (for files on a server whose clock may be
    more than a second off the feeder's, or whose times are kept coarser than a millisecond)."""
    remember_done: float = setting(DEFAULT_REMEMBER_DONE, ge=0)
    """Seconds the ids of done records are remembered (at least this, at most twice): a record pushed again
    within it is ``Ignored``, and receipts about it are answered ``done``. 0 remembers nothing, as the 2014
    data-q: a file pushed again is moved again, and a site before this one in a cascade, asking for its receipt,
    hears ``unknown`` once the record is done here and sends it again after its ``resend_after``."""
    search_names: int = setting(DEFAULT_SEARCH_NAMES, ge=0)
    """The records pushed lately that the web console finds by file name, glob or path: the newest
    ``search_names`` to twice as many are kept (in Redis, their ids and stored values: 123 bytes each with
    40-character paths, measured by ``bench/name_index.py``). 0 keeps none: the console then finds records by id
    only."""
    push_port: int | None = setting(None, ge=0, le=MAX_PORT)
    """This queue's push daemon port; None: ``push.port``."""
    activities: Mapping[str, ActivitySettings] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Activity name -> how its records are chosen and served (``[queues.NAME.activities.ACTIVITY]``;
    :mod:`dataq.activities`). None: every record is ``default``'s, in arrival order."""
    action_options: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, metadata={ROLE_KEY: SUB_TABLES}
    )
    """Action name -> its raw options (``[queues.NAME.ACTION]``), validated by the action registry."""
    _rules: RecordRules = field(init=False, repr=False, compare=False)

    def _check(self) -> None:
        if QUEUE_NAME_PATTERN.fullmatch(self.name) is None:
            raise Invalid("name", f"queue name {self.name!r} is invalid: use 1 to 64 letters, digits, _, - or .")
        actions = tuple(self.actions)
        object.__setattr__(self, "actions", actions)
        if not actions:
            raise Invalid("actions", "key '{key}' must name at least one action")
        for action in actions:
            if ACTION_PATTERN.fullmatch(action) is None:
                raise Invalid("actions", f"key '{{key}}' holds an invalid action name {action!r}")
            if actions.count(action) > 1:
                raise Invalid("actions", f"key '{{key}}' names {action!r} more than once")
        object.__setattr__(self, "action_options", freeze(self.action_options))
        object.__setattr__(self, "activities", MappingProxyType(dict(self.activities)))
        if len(self.activities) > MAX_ACTIVITIES:
            raise Invalid("activities", f"key '{{key}}' defines {len(self.activities)} activities; at most "
                          f"{MAX_ACTIVITIES}: every claim looks at each one")
        for action in self.action_options:
            # An entry's options table is named after the entry without its inline argument ('sleep' for
            # 'sleep:0.5', 'site.mod:Class' for 'site.mod:Class:arg'); the action registry checks which one.
            if not any(entry == action or entry.startswith(f"{action}:") for entry in actions):
                raise Invalid(action, f"{{key}}: options for action {action!r}, which is not in {{table}}.actions")
        if self.retry_max_delay < self.retry_delay:
            raise Invalid("retry_max_delay", f"key '{{key}}' ({self.retry_max_delay}) must not be less than "
                          f"{{table}}.retry_delay ({self.retry_delay})")
        try:
            check_queue_algorithm(self.checksum)
        except ValueError as exc:
            raise Invalid("checksum", f"key '{{key}}': {exc}") from exc
        if self.source_check not in SOURCE_CHECKS:
            raise Invalid("source_check", f"key '{{key}}' must be one of {', '.join(map(repr, SOURCE_CHECKS))}, "
                          f"not {self.source_check!r}")
        pattern = self.checksum_pattern if self.checksum_pattern is not None else pattern_for(self.checksum)
        try:
            object.__setattr__(self, "_rules", RecordRules(pattern, self.checksum,
                                                           frozenset({DEFAULT_ACTIVITY, *self.activities})))
        except InvalidRecord as exc:
            raise Invalid("checksum_pattern", f"key '{{key}}': {exc}") from exc

    @property
    def rules(self) -> RecordRules:
        """How this queue validates records (its checksum pattern, compiled once)."""
        return self._rules
