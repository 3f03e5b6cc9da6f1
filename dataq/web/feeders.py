"""The feeders that report to this site, as the console shows them: each one's metrics endpoint read when the page
asks (its spool, its link to the push daemons, its last acknowledgement).

Which feeders: this site's own (``[feed] directories``, each serving on its ``metrics_port``) and those the
operator lists in ``[web] feeders`` (``host:port`` of a feeder's endpoint elsewhere, an instrument's host). An
endpoint that does not answer within :data:`SCRAPE_TIMEOUT` is shown as not reporting: the feeder is down, or
its host out of reach.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from dataq.config import Settings
from dataq.feed.metrics import LAST_SUCCESS, LINK_UP, SENT, SPOOL_OLDEST, SPOOL_PENDING, SPOOL_REFUSED

SCRAPE_TIMEOUT = 1.5
"""Seconds the console waits for one feeder's endpoint."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a feeder serves its metrics, and what the console calls it."""

    address: str
    """``host:port``."""
    label: str


@dataclass(slots=True)
class FeederView:
    """One feeder as its endpoint reports it (per watched directory: one endpoint may serve several)."""

    endpoint: Endpoint
    reporting: bool
    error: str | None = None
    directories: list[dict[str, Any]] = field(default_factory=list)

    def doc(self) -> dict[str, Any]:
        return {"address": self.endpoint.address, "label": self.endpoint.label, "reporting": self.reporting,
                "error": self.error, "directories": self.directories}


def endpoints(settings: Settings) -> list[Endpoint]:
    """The feeders of this site's ``[feed] directories`` and those of ``[web] feeders``, each once."""
    found: dict[str, Endpoint] = {}
    feed = settings.feed
    host = settings.metrics.host if settings.metrics.host not in ("0.0.0.0", "::") else "127.0.0.1"
    if settings.metrics.enabled and feed.metrics_port:
        for directory in feed.directories:
            address = f"{host}:{feed.metrics_port_for(directory)}"
            found.setdefault(address, Endpoint(address, directory))
    for address in settings.web.feeders:
        found.setdefault(address, Endpoint(address, address))
    return list(found.values())


def directories_of(text: str, now: float) -> list[dict[str, Any]]:
    """Per watched directory, what a feeder's exposition says of its spool and link."""
    wanted = {SPOOL_PENDING: "pending", SPOOL_OLDEST: "oldest_pending_age_seconds", SPOOL_REFUSED: "refused",
              LINK_UP: "link_up", SENT: "sent", LAST_SUCCESS: "last_acknowledged"}
    rows: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = wanted.get(sample.name)
            if key is None:
                continue
            directory = sample.labels.get("directory", "")
            # Every key, None where the exposition lacks it (a feeder that could not read its spool, one without
            # targets, an older one): the page shows what is there.
            row = rows.setdefault(directory, {"directory": directory, "connected": None, "targets": [],
                                              **dict.fromkeys(wanted.values())})
            if key == "link_up":
                # One series per push daemon target: connected when any link is.
                row["connected"] = bool(row["connected"]) or sample.value >= 1
                row["targets"].append(sample.labels.get("target", ""))
            else:
                row[key] = sample.value
    for row in rows.values():
        row.pop("link_up", None)  # said as "connected"
        last = row.get("last_acknowledged")
        row["last_acknowledged_age_seconds"] = round(now - last, 3) if isinstance(last, float) and last > 0 else None
    return sorted(rows.values(), key=lambda row: str(row["directory"]))


async def scrape(session: aiohttp.ClientSession, endpoint: Endpoint) -> FeederView:
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT):
            async with session.get(f"http://{endpoint.address}/metrics") as response:
                if response.status != 200:
                    return FeederView(endpoint, False, f"its endpoint answered {response.status}")
                text = await response.text()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return FeederView(endpoint, False, f"its endpoint does not answer: {exc or type(exc).__name__}")
    try:
        return FeederView(endpoint, True, directories=directories_of(text, time.time()))
    except ValueError as exc:
        return FeederView(endpoint, False, f"its endpoint's answer is not Prometheus's text format: {exc}")


async def feeders(settings: Settings, found: Sequence[Endpoint] | None = None) -> list[FeederView]:
    """Every feeder's view, read at once (one slow endpoint costs the page its timeout, not one each)."""
    targets = list(endpoints(settings) if found is None else found)
    if not targets:
        return []
    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(scrape(session, endpoint) for endpoint in targets)))


__all__ = ["Endpoint", "FeederView", "endpoints", "feeders"]
