"""How a queue is doing: whether its daemons are alive, and how fast records move (``dataq-cli --health`` and
``--summary`` print it). Library code rather than the CLI's, so every view of a queue reads it the same way."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from dataq.store import QueueStore, ReplicationStatus, Summary, Worker

RATE_WINDOW = 60.0
"""Seconds of events the rates count."""
RATE_KINDS = ("pushed", "done", "failed")
RATE_CHUNK = 10_000
"""Events read per round trip when counting rates."""
REPLICA_LAG_WARNING = 10
"""Seconds without an acknowledgement from a replica after which it counts as falling behind."""
RATE_EVENT_CAP = 500_000
"""Most events read for the rates; past it, the rates cover only the part of the window read."""


@dataclass(frozen=True, slots=True)
class Health:
    """Whether Redis answers and every registered daemon has a fresh heartbeat, and why not."""

    healthy: bool
    reason: str
    alive: int
    """Daemons with a fresh heartbeat."""
    registered: int


@dataclass(frozen=True, slots=True)
class Rates:
    """Events per minute of the kinds --summary reports, and how much of the window the stream covered."""

    per_minute: Mapping[str, float]
    window: float
    """Seconds asked for."""
    covered: float
    """Seconds the counted events actually span (less than ``window`` when the stream was trimmed or capped)."""

    @property
    def complete(self) -> bool:
        return self.covered >= self.window


@dataclass(frozen=True, slots=True)
class Unreachable:
    """A destination some live pop daemon of the queue cannot reach (from their heartbeats)."""

    destination: str
    since: float
    """When the first daemon marked it unreachable (wall clock)."""
    error: str
    """The last error a daemon reported for it."""
    waiting: int
    """Records waiting for it: every active and delayed record of the queue, since each runs every action."""
    workers: tuple[str, ...]
    """The daemons that cannot reach it."""


def unreachable_destinations(workers: list[Worker], summary: Summary) -> list[Unreachable]:
    """The outages the live pop daemons report, one per destination, the oldest first."""
    found: dict[str, tuple[float, str, list[str]]] = {}
    for worker in workers:
        outages = (worker.heartbeat or {}).get("unreachable")
        for outage in outages if isinstance(outages, list) else ():
            destination, since = str(outage.get("destination", "?")), float(outage.get("since", 0.0))
            first, error, names = found.get(destination, (since, str(outage.get("error", "")), []))
            found[destination] = (min(first, since), error, [*names, worker.worker_id])
    return sorted((Unreachable(destination, since, error, summary.active + summary.delayed, tuple(names))
                   for destination, (since, error, names) in found.items()), key=lambda u: u.since)


def replication_problems(status: ReplicationStatus) -> list[str]:
    """What is wrong with the master's replicas and sentinels, worst first (none: all is well)."""
    problems = []
    if status.online < status.min_replicas:
        problems.append(f"only {status.online} replica(s) connected to the master {status.master}, "
                        f"min_replicas is {status.min_replicas}: writes are refused")
    for replica in status.replicas:
        if replica.state != "online":
            problems.append(f"replica {replica.address} is {replica.state}")
        elif replica.lag_seconds is not None and replica.lag_seconds >= REPLICA_LAG_WARNING:
            problems.append(f"replica {replica.address} has not acknowledged for {replica.lag_seconds} s")
    if status.sentinels:
        down = [address for address, up in status.sentinels.items() if not up]
        if down:
            problems.append(f"sentinel(s) {', '.join(down)} do not answer ({status.sentinels_up} of "
                            f"{len(status.sentinels)} do)")
    return problems


async def check_health(store: QueueStore) -> Health:
    """Redis answers, enough replicas are connected for ``min_replicas``, and every daemon registered on the
    queue has a fresh heartbeat."""
    await store.ping()
    workers = await store.workers()
    dead = [w.worker_id for w in workers if w.heartbeat is None]
    registered = len(workers)
    alive = registered - len(dead)
    if store.replication.enabled:
        status = await store.replication_status()
        if status.online < status.min_replicas:
            return Health(False, replication_problems(status)[0], alive, registered)
    if not workers:
        return Health(False, f"no daemon is running for queue {store.queue}", 0, 0)
    if dead:
        more = f" and {len(dead) - 1} more" if len(dead) > 1 else ""
        reason = f"worker {dead[0]}{more} has no fresh heartbeat ({alive} of {registered} alive)"
        return Health(False, reason, alive, registered)
    daemons = "daemon is" if alive == 1 else "daemons are"
    return Health(True, f"Redis answers; {alive} {daemons} alive for queue {store.queue}", alive, registered)


async def rates(store: QueueStore, now: float | None = None) -> Rates:
    """Pushed, done and failed events per minute over the last :data:`RATE_WINDOW` seconds.

    Reads only the window's events (at most :data:`RATE_EVENT_CAP`). The stream is trimmed by length and age,
    so when its oldest event is younger than the window and older ones were dropped, the rates cover only what
    is left, and say so.
    """
    end = time.time() if now is None else now
    start = end - RATE_WINDOW
    covered_from, covered_to = start, end
    stream = await store.event_stream_info()
    if stream.first is not None and stream.first.time > start and stream.trimmed is not False:
        # Events older than the oldest one kept were dropped, and some of them may have been in the window.
        covered_from = stream.first.time
    counts = dict.fromkeys(RATE_KINDS, 0)
    last_id, read = f"{int(start * 1000)}-0", 0
    while True:
        batch = await store.events_after(last_id, count=RATE_CHUNK)
        for event in batch:
            if event.kind in counts:
                counts[event.kind] += 1
        read += len(batch)
        if len(batch) < RATE_CHUNK:
            break
        last_id = batch[-1].event_id
        if read >= RATE_EVENT_CAP:
            covered_to = batch[-1].time
            break
    covered = max(covered_to - covered_from, 0.0)
    per_minute = {kind: (n * 60.0 / covered if covered > 0 else 0.0) for kind, n in counts.items()}
    return Rates(per_minute, RATE_WINDOW, min(covered, RATE_WINDOW))
