"""The stored form of a record: the value Redis keeps under its id in the queue's ``records`` hash.

Fields joined by NUL, which no validated field can contain: ``path``, ``size``, the push time in microseconds,
the source, then optional fields a newer dataq added (older values simply lack them): the file's identity
(:attr:`~dataq.record.Record.identity`, empty when not known), flags (``again``: :attr:`~dataq.record.Record.again`)
and the activity (:attr:`~dataq.record.Record.activity`; absent or empty: ``default``).
Extra trailing fields, from a newer dataq still, are ignored. This module alone writes or reads the form.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataq.errors import InvalidRecord
from dataq.file_identity import Identity
from dataq.keys import DEFAULT_ACTIVITY
from dataq.record import DIGITS, IDENTITY_FIELDS, Record, as_identity

_STORED_SEPARATOR = "\0"
AGAIN_FLAG = "again"
"""The flags field of a record pushed again on purpose."""


def encode_stored(items: Sequence[tuple[Record, str]], pushed_at: float) -> list[str]:
    """The values Redis keeps for records pushed at one time, each with its source (the checksum is the hash
    field, not part of the value).

    The push time is kept to the microsecond: together with the source it makes the value of one write unique,
    which is how a retried write recognises what its own lost attempt stored (see ``push_batch.lua``). It and each
    source are formatted once per batch, not per record. A path or id that would break the framing is refused.
    """
    stamp = str(round(pushed_at * 1_000_000))
    tails: dict[str, str] = {}
    # A fifth field, the file's identity, and a sixth, the flags, only when there is something to say: values without
    # them stay as older dataqs wrote them.
    values = []
    for record, source in items:
        tail = tails.get(source)
        if tail is None:
            # NUL separates the fields; a newline would break the claim reply's framing (see ``claim.lua``).
            clean = source.replace(_STORED_SEPARATOR, "?").replace("\n", "?")
            tail = tails[source] = f"{_STORED_SEPARATOR}{stamp}{_STORED_SEPARATOR}{clean}"
        path, checksum = record.path, record.checksum
        # Parsing never lets such a path or id through; a record built in code might, and would break the framing
        # (fields joined by NUL, records by newlines).
        if _STORED_SEPARATOR in path or "\n" in path:
            raise InvalidRecord(f"path {path!r} contains a NUL or a newline")
        if not checksum or "\n" in checksum:
            raise InvalidRecord(f"checksum {checksum!r} is empty or contains a newline")
        value = f"{path}{_STORED_SEPARATOR}{record.size}{tail}"
        activity = record.activity if record.activity != DEFAULT_ACTIVITY else None
        if record.identity is not None or record.again or activity is not None:
            value += _STORED_SEPARATOR + (":".join(map(str, record.identity)) if record.identity is not None else "")
        if record.again or activity is not None:
            value += _STORED_SEPARATOR + (AGAIN_FLAG if record.again else "")
        if activity is not None:
            # Read by the scripts that put a record back in its activity's list (lib/activities.lua).
            value += _STORED_SEPARATOR + activity
        values.append(value)
    return values


def stored_pushed_at(value: str) -> float | None:
    """When the record stored as ``value`` was pushed (unix time), read without decoding the rest; None for a
    value that does not hold one (written by hand)."""
    parts = value.split(_STORED_SEPARATOR, 3)
    try:
        return int(parts[2]) / 1_000_000 if len(parts) >= 3 else None
    except ValueError:
        return None


def decode_stored(checksum: str, value: str) -> Record:
    """Inverse of :func:`encode_stored`; extra trailing fields (from a newer dataq) are ignored, and so is an
    identity that does not parse (the file is then read again, as for a record without one)."""
    parts = value.split(_STORED_SEPARATOR)
    if len(parts) < 4:
        raise InvalidRecord(f"stored record {checksum} is corrupt ({len(parts)} fields)")
    path, size, pushed_us, source = parts[:4]
    return Record(
        path=path,
        checksum=checksum,
        size=int(size),
        pushed_at=int(pushed_us) / 1_000_000,
        source=source,
        identity=_stored_identity(parts[4]) if len(parts) > 4 else None,
        again=len(parts) > 5 and AGAIN_FLAG in parts[5].split(","),
        activity=parts[6] if len(parts) > 6 and parts[6] else None,
    )


def _stored_identity(text: str) -> Identity | None:
    fields = text.split(":")
    if len(fields) != IDENTITY_FIELDS or not all(DIGITS.fullmatch(field) for field in fields):
        return None
    return as_identity([int(field) for field in fields])
