"""A queue's destinations as the console shows them: each one's state (reachable, unreachable since when, outside
its windows until when), the connections open to it, the transfer tuner's batch size, link rate and last decision,
and the limits the settings put on it.

Where they come from: the queue's actions' options (what the operator configured) and the live pop daemons'
heartbeats (what the daemons see now), which every pop daemon refreshes each few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from dataq.config import QueueSettings
from dataq.ops.documents import HELD_BACK_KEY, OPEN_KEY, TUNING_KEY, WAITING_KEY
from dataq.ops.health import live_pops, outside_windows, unreachable_destinations
from dataq.store import Worker

DESTINATION_KEYS = ("destination", "root", "archive_root")
"""The options naming where an action puts records, the first found wins (``network_move``, ``disk_store``,
``archive_ingest``)."""
LIMIT_KEYS = ("max_connections", "bandwidth", "windows", "batch_size", "max_batch_size", "in_flight")
"""The options that limit what an action sends to its destination, shown beside it."""


def _summed(before: object, value: object, name: str) -> object:
    """What several pop daemons report of one destination: the calls open add up; of the rest, the last says."""
    if name == "open" and isinstance(before, dict) and isinstance(value, dict):
        return {"open": int(before.get("open", 0)) + int(value.get("open", 0)),
                "most": int(before.get("most", 0)) + int(value.get("most", 0))}
    return value


def _shown(value: object) -> object:
    """A limit as JSON and the page show it: a list of windows or of a timetable's entries as one string."""
    return ", ".join(str(item) for item in value) if isinstance(value, (list, tuple)) else value


def _configured(queue: QueueSettings) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for action in queue.actions:
        options: Mapping[str, Any] = queue.action_options.get(action, {})
        where = next((str(options[key]) for key in DESTINATION_KEYS if options.get(key)), action)
        found[where] = {"destination": where, "action": action,
                        "limits": {key: _shown(options[key]) for key in LIMIT_KEYS if key in options}}
    return found


def destinations(queue: QueueSettings | None, workers: Sequence[Worker], now: float | None = None
                 ) -> list[dict[str, Any]]:
    """Each destination of the queue, configured or reported by a pop daemon, in the actions' order."""
    now = time.time() if now is None else now
    rows = _configured(queue) if queue is not None else {}
    live = live_pops(workers)

    def row(destination: str) -> dict[str, Any]:
        return rows.setdefault(destination, {"destination": destination, "action": None, "limits": {}})

    for outage in unreachable_destinations(workers):
        row(outage.destination).update(state="unreachable", since=outage.since, error=outage.error)
    for shut in outside_windows(workers):
        row(shut.destination).setdefault("state", "outside window")
        row(shut.destination).update(opens=shut.opens, windows=shut.windows)
    for worker in live:
        beat = worker.heartbeat or {}
        for key, name in ((OPEN_KEY, "open"), (HELD_BACK_KEY, "held_back"), (WAITING_KEY, "waiting"),
                          (TUNING_KEY, "tuning")):
            reported = beat.get(key)
            for destination, value in (reported.items() if isinstance(reported, dict) else ()):
                row(str(destination))[name] = _summed(row(str(destination)).get(name), value, name)
    for item in rows.values():
        item.setdefault("state", "in use" if live else "no pop daemon")
        for key in ("since", "error", "opens", "windows", "open", "held_back", "waiting", "tuning"):
            item.setdefault(key, None)
        since = item.get("since")
        item["for_seconds"] = round(now - since, 3) if isinstance(since, (int, float)) else None
    return list(rows.values())


__all__ = ["destinations"]
