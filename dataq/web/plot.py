"""The console's plots: inline SVG drawn on the server from the rates ring (no chart library, nothing fetched by the
browser), over the last hour (10-second buckets) or day (5-minute buckets).

Four views of a queue: its records per minute (pushed, done, failed), its bytes done per second, its records not
yet done, and how long its next record to run had waited (sampled by the pop daemons into the ring). Records not
yet done are drawn from the counts, backwards from now: at the end of each bucket, the records tracked now less
those pushed since, plus those done since (exact but for records an operator cleared).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT, MARGIN = 720, 160, 36
SERIES = (("pushed", "#3465a4"), ("done", "#4e9a06"), ("failed", "#cc0000"))
"""Each plotted kind of records and its colour."""
BYTES_COLOUR = "#75507b"
BACKLOG_COLOUR = "#c4a000"
AGE_COLOUR = "#ce5c00"
DURATIONS = ((3600.0, "h"), (60.0, "min"), (1.0, "s"))
SCALES = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))


class View(enum.StrEnum):
    FILES = "files"
    BYTES = "bytes"
    BACKLOG = "backlog"
    AGE = "age"


class Span(enum.StrEnum):
    HOUR = "hour"
    DAY = "day"

    @property
    def words(self) -> str:
        return "-60 min" if self is Span.HOUR else "-24 h"


def _svg(series: Sequence[tuple[str, str, Sequence[float]]], top_label: str, span: Span, title: str) -> str:
    """Polylines of equally spaced points, oldest on the left, scaled to the highest point of them all."""
    top = max((max(values, default=0.0) for _, _, values in series), default=0.0) or 1.0
    inner_w, inner_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    length = max((len(values) for _, _, values in series), default=1)
    step = inner_w / max(length - 1, 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="rates" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'role="img" aria-label="{escape(title)}">',
             f'<rect x="{MARGIN}" y="{MARGIN}" width="{inner_w}" height="{inner_h}" fill="none" stroke="#ccc"/>',
             f'<text x="{MARGIN}" y="{MARGIN - 8}" font-size="13">{escape(top_label.format(top=top))}</text>',
             f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 14}" font-size="13">{span.words}</text>',
             f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 14}" font-size="13" text-anchor="end">now</text>']
    for index, (name, colour, values) in enumerate(series):
        points = " ".join(f"{MARGIN + i * step:.1f},{MARGIN + inner_h - value / top * inner_h:.1f}"
                          for i, value in enumerate(values))
        parts.append(f'<polyline class="series-{escape(name)}" fill="none" stroke="{colour}" stroke-width="1.5" '
                     f'points="{points}"/>')
        parts.append(f'<text x="{MARGIN + 90 * index + 110}" y="{MARGIN - 8}" font-size="13" fill="{colour}">'
                     f'{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def rate_plot(buckets: Sequence[Mapping[str, Any]], bucket_seconds: float = 10.0, span: Span = Span.HOUR) -> str:
    """Records per minute of each kind."""
    series = [(kind, colour, [float(b.get(kind, 0)) * 60.0 / bucket_seconds for b in buckets])
              for kind, colour in SERIES]
    return _svg(series, "{top:,.0f}/min", span, f"records per minute over the last {span.value}")


def bytes_plot(buckets: Sequence[Mapping[str, Any]], bucket_seconds: float, span: Span) -> str:
    """Bytes done per second, in the unit that suits the highest."""
    per_second = [float(b.get("done_bytes", 0)) / bucket_seconds for b in buckets]
    scale, unit = _scale(max(per_second, default=0.0))
    return _svg([(f"done {unit}/s", BYTES_COLOUR, [value / scale for value in per_second])],
                "{top:,.1f} " + unit + "/s", span, f"bytes done per second over the last {span.value}")


def byte_rate(per_second: float) -> str:
    """``12.3 MB/s``: bytes per second in the unit that suits them (the page's words and the script's agree)."""
    scale, unit = _scale(per_second)
    return f"{per_second / scale:,.1f} {unit}/s"


def _scale(value: float) -> tuple[float, str]:
    return next(((scale, unit) for scale, unit in SCALES if value >= scale), SCALES[-1])


def not_done(buckets: Sequence[Mapping[str, Any]], tracked_now: int) -> list[float]:
    """Records tracked at the end of each bucket, counted back from now: each bucket after it added its pushed
    records and took away its done ones."""
    values, level = [], float(tracked_now)
    for bucket in reversed(buckets):
        values.append(max(0.0, level))
        level -= float(bucket.get("pushed", 0)) - float(bucket.get("done", 0))
    return values[::-1]


def backlog_plot(buckets: Sequence[Mapping[str, Any]], tracked_now: int, span: Span) -> str:
    return _svg([("not done", BACKLOG_COLOUR, not_done(buckets, tracked_now))], "{top:,.0f} records", span,
                f"records not yet done over the last {span.value}")


def waited(buckets: Sequence[Mapping[str, Any]]) -> list[float]:
    """How long the next record had waited, per bucket: its last sample, or the one before where a bucket has
    none (a pop daemon samples it every second or so; none ran: 0)."""
    values, last = [], 0.0
    for bucket in buckets:
        sample = bucket.get("backlog_age")
        last = float(sample) if sample is not None else last
        values.append(last)
    return values


def age_plot(buckets: Sequence[Mapping[str, Any]], span: Span) -> str:
    """How long the next record to run had waited, in the unit that suits the longest."""
    values = waited(buckets)
    scale, unit = next(((s, u) for s, u in DURATIONS if max(values, default=0.0) >= s), DURATIONS[-1])
    return _svg([("next record waited", AGE_COLOUR, [value / scale for value in values])], "{top:,.1f} " + unit,
                span, f"how long the next record had waited over the last {span.value}")


__all__ = ["Span", "View", "age_plot", "backlog_plot", "byte_rate", "bytes_plot", "not_done", "rate_plot", "waited"]
