"""Path templates of the storage and transfer actions: which placeholders a layout may use, and rendering a
record's path so that it never leaves its root."""

from __future__ import annotations

import os
import string
import time
from collections.abc import Collection, Mapping

from dataq.errors import ActionError
from dataq.record import Record

LAYOUT_FIELDS: frozenset[str] = frozenset({"checksum", "checksum2", "date", "name", "size"})
"""Placeholders of a storage layout: the record's checksum, its first two characters, the UTC date it was pushed
(``YYYYMMDD``, today if unknown), the source file's base name and its size."""


class UnsafePath(ActionError):
    """A target path would leave its root: ``..``, an absolute part, or a symlink on the way."""


def check_template(template: str, fields: Collection[str], *, absolute: bool = False) -> str:
    """``template`` if it only uses plain ``{field}`` placeholders of ``fields`` (ValueError otherwise).

    No conversions, format specs, attribute or index access: a template can only paste record values, never
    reach into objects. Whether a rendered path stays inside its root is checked on every render.
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"template {template!r} is malformed: {exc}") from exc
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in fields:
            raise ValueError(f"template {template!r} uses {{{field}}}; the placeholders are: "
                             f"{', '.join('{' + name + '}' for name in sorted(fields))}")
        if spec or conversion:
            raise ValueError(f"template {template!r}: placeholder {{{field}}} takes no format spec or conversion")
    if template.startswith("/") != absolute:
        raise ValueError(f"template {template!r} must {'' if absolute else 'not '}start with '/'")
    return template


_SAMPLE_VALUES = {"checksum": "0" * 32, "checksum2": "00", "date": "19700101", "name": "file", "size": "0",
                  "relpath": "file"}


def check_layout(template: str, fields: Collection[str] = LAYOUT_FIELDS, *, absolute: bool = False) -> str:
    """:func:`check_template`, then refuse a template that leaves its root whatever the record (``../{name}``)."""
    check_template(template, fields, absolute=absolute)
    try:
        render(template, _SAMPLE_VALUES, absolute=absolute)
    except UnsafePath as exc:
        raise ValueError(f"template {template!r}: {exc}") from exc
    return template


def record_values(record: Record, now: float | None = None) -> dict[str, str]:
    """The values of :data:`LAYOUT_FIELDS` for ``record``."""
    when = record.pushed_at if record.pushed_at is not None else (time.time() if now is None else now)
    return {
        "checksum": record.checksum,
        "checksum2": record.checksum[:2],
        "date": time.strftime("%Y%m%d", time.gmtime(when)),
        "name": os.path.basename(record.path),
        "size": str(record.size),
    }


def safe_parts(relative: str) -> tuple[str, ...]:
    """The components of a relative path that stays beneath its root; UnsafePath otherwise."""
    parts = tuple(relative.split("/"))
    for part in parts:
        if part in ("", ".", "..") or "\0" in part:
            raise UnsafePath(f"path {relative!r} would leave its root (empty, '.' or '..' component)")
    return parts


def render(template: str, values: Mapping[str, str], *, absolute: bool = False) -> str:
    """``template`` with ``values`` pasted in, checked to stay beneath its root (UnsafePath otherwise)."""
    path = template.format_map(values)
    if absolute:
        if not path.startswith("/"):
            raise UnsafePath(f"path {path!r} is not absolute")
        safe_parts(path[1:])
    else:
        safe_parts(path)
    return path
