"""Where a cascade's round went (``bench/cascade.py --versus-rsync --profile``): the CPU seconds of each process by
its part (a site's pop or push daemon, rsync daemon or redis-server, a link's relay), and the sites' batches in
order of their end, from the pop daemons' logs, in seconds since the first line was fed."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path

BATCH_EVENTS = ("moved a batch", "stored a batch", "batch size changed")
"""The pop daemons' log lines the timeline shows (``network_move``, ``disk_store``, the transfer tuner)."""


def part_of(command: str, root: Path, sites: Iterable[str], redis_ports: dict[int, str]) -> str | None:
    """What a process is to the flow, from its command line; None: not one of the flow's."""
    for site in sites:
        if f"{root / site / 'dataq.toml'}" in command:
            return f"{site} {'pop' if ' pop ' in command else 'push'} daemon"
        if f"{root / site / 'rsyncd'}" in command:
            return f"{site} rsync daemon"
    for port, site in redis_ports.items():
        if "redis-server" in command and f"127.0.0.1:{port}" in command:
            return f"{site} redis-server"
    if "testbed.link" in command:
        target = command.split("--target ", 1)[1].split(maxsplit=1)[0] if "--target " in command else "?"
        return f"link relay to {target}"
    return None


def processes() -> Iterator[tuple[int, str, float]]:
    """Every process's pid, command line and CPU seconds so far (its reaped children's included)."""
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        yield int(pid), command, sum(int(value) for value in fields[11:15]) / tick


def cpu_by_part(root: Path, sites: Iterable[str], redis_ports: dict[int, str]) -> dict[int, tuple[str, float]]:
    """Per process of the flow (the links' relays included): its part and CPU seconds so far."""
    names = list(sites)
    found = {}
    for pid, command, seconds in processes():
        part = part_of(command, root, names, redis_ports)
        if part is not None:
            found[pid] = (part, seconds)
    return found


def cpu_lines(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float) -> list[str]:
    totals: dict[str, float] = {}
    for pid, (part, used) in after.items():
        totals[part] = totals.get(part, 0.0) + used - before.get(pid, (part, 0.0))[1]
    lines = [f"  {used:6.2f}  {part}" for part, used in sorted(totals.items(), key=lambda item: -item[1])]
    whole = sum(totals.values())
    return [f"CPU seconds by part ({whole:.2f} in {seconds:.2f} s on {os.cpu_count()} CPUs):", *lines]


def timeline(root: Path, sites: Iterable[str], started: float) -> list[str]:
    """The sites' batches and the tuner's steps, in order, ``started`` (Unix time) being the first line fed."""
    events = []
    for site in sites:
        log = root / site / "log" / "pop.log"
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") not in BATCH_EVENTS:
                continue
            at = datetime.fromisoformat(str(entry["timestamp"]).replace("Z", "+00:00")).timestamp()
            detail = (f"to {entry.get('batch_size')} records: {entry.get('reason')}"
                      if entry["event"] == "batch size changed"
                      else f"{entry.get('records')} records in {entry.get('seconds')} s")
            events.append((at - started, site, entry["event"], detail))
    return ["batches, by their end (seconds since the first line fed):",
            *(f"  {at:6.2f}  {site:9} {event}: {detail}" for at, site, event, detail in sorted(events))]
