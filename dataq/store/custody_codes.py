"""The codes the custody scripts and the store share, in one place: each is an enum here, and the scripts get them
as their first lines (:func:`lua_constants`, put before every script by the store), so neither side spells a
letter the other must guess."""

from __future__ import annotations

import enum


class Step(enum.StrEnum):
    """What becomes of a custody entry once its next site was asked (``custody_step.lua``)."""

    DONE = "d"
    """The end of the chain holds it: it leaves custody."""
    PENDING = "p"
    """Still on its way: kept, with where it is, and asked about again later."""
    ASK_LATER = "w"
    """No answer (an outage, or a site that does not speak receipts): asked about again later, nothing kept."""
    RESEND = "r"
    """Unknown there for longer than ``resend_after``: queued here again, to be sent again."""


class Whereabouts(enum.StrEnum):
    """What ``receipts.lua`` says this site knows of an id."""

    TRACKED = "t"
    """In this site's queue (:class:`TrackedState`)."""
    IN_CUSTODY = "c"
    """Handed on, in this site's custody."""
    DONE = "d"
    """Done here and remembered (``remember_done``)."""
    LOST = "l"
    """Done here once, then marked lost by an audit that found its stored copy missing or damaged."""
    UNKNOWN = "u"
    """Not known here."""


class TrackedState(enum.StrEnum):
    """Where a record in this site's queue is."""

    QUEUED = "queued"
    """Waiting or running."""
    DELAYED = "delayed"
    """A retry waits."""
    INACTIVE = "inactive"
    """Failed more than ``max_errors`` times: waits for an operator."""


SHARED = {"STEP": Step, "KNOWN": Whereabouts, "STATE": TrackedState}
"""Each enum's prefix in Lua: ``STEP_DONE``, ``KNOWN_TRACKED``, ``STATE_QUEUED``..."""


def lua_constants() -> str:
    """The codes as Lua locals, one line per enum."""
    lines = []
    for prefix, codes in SHARED.items():
        names = ", ".join(f"{prefix}_{code.name}" for code in codes)
        values = ", ".join(f"'{code.value}'" for code in codes)
        lines.append(f"local {names} = {values}")
    return "\n".join(lines)
