"""The rate plot: counts per 10-second bucket over the last hour, as an inline SVG drawn on the server (no
chart library, nothing fetched by the browser)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT, MARGIN = 720, 160, 36
SERIES = (("pushed", "#3465a4"), ("done", "#4e9a06"), ("failed", "#cc0000"))
"""Each plotted kind and its colour."""


def rate_plot(buckets: Sequence[Mapping[str, Any]], bucket_seconds: float = 10.0) -> str:
    """An SVG polyline per kind of records per minute, oldest bucket on the left."""
    per_minute = {kind: [float(b.get(kind, 0)) * 60.0 / bucket_seconds for b in buckets] for kind, _ in SERIES}
    top = max((max(values, default=0.0) for values in per_minute.values()), default=0.0) or 1.0
    inner_w, inner_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    step = inner_w / max(len(buckets) - 1, 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="rates" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'role="img" aria-label="records per minute over the last hour">',
             f'<rect x="{MARGIN}" y="{MARGIN}" width="{inner_w}" height="{inner_h}" fill="none" stroke="#ccc"/>',
             f'<text x="{MARGIN}" y="{MARGIN - 8}" font-size="11">{top:,.0f}/min</text>',
             f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 14}" font-size="11">-60 min</text>',
             f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 14}" font-size="11" text-anchor="end">now</text>']
    for index, (kind, colour) in enumerate(SERIES):
        points = " ".join(f"{MARGIN + i * step:.1f},{MARGIN + inner_h - value / top * inner_h:.1f}"
                          for i, value in enumerate(per_minute[kind]))
        parts.append(f'<polyline class="series-{escape(kind)}" fill="none" stroke="{colour}" stroke-width="1.5" '
                     f'points="{points}"/>')
        parts.append(f'<text x="{MARGIN + 90 * index + 80}" y="{MARGIN - 8}" font-size="11" fill="{colour}">'
                     f'{escape(kind)}</text>')
    parts.append("</svg>")
    return "".join(parts)
