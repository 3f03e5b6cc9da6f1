"""How a queue is doing: whether its daemons are alive, and how fast records move (``dataq-cli --health`` and
``--summary`` print it). Library code rather than the CLI's, so every view of a queue reads it the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dataq.store import QueueStore, ReplicationStatus, Worker

RATE_WINDOW = 60.0
"""Seconds the rates are counted over."""
RATES_REPORTED = ("pushed", "done", "failed")
"""The kinds of the rates ring that --summary reports a rate of."""
REPLICA_LAG_WARNING = 10
"""Seconds without an acknowledgement from a replica after which it counts as falling behind."""


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
    """Records per minute of the kinds --summary reports, over the last minute of the rates ring."""

    per_minute: Mapping[str, float]
    window: float
    """Seconds asked for."""
    covered: float
    """Seconds the counts span: the whole 10-second buckets of the window and the current one so far (a little
    under ``window``), or less when the ring began counting within the window."""
    complete: bool
    """Whether the ring counted every record of the span (False for a queue older than its ring, at first)."""


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


POP_ROLE = "pop"
"""The role a pop daemon registers with (its registry ``info``)."""


def live_pops(workers: Sequence[Worker]) -> list[Worker]:
    """The pop daemons of the queue with a fresh heartbeat."""
    return [worker for worker in workers if worker.heartbeat is not None and worker.info.get("role") == POP_ROLE]


def unreachable_destinations(workers: Sequence[Worker], waiting: int = 0) -> list[Unreachable]:
    """The outages the live pop daemons report, one per destination, the oldest first; ``waiting``: the records
    waiting for them (the queue's active and delayed ones, since each runs every action)."""
    found: dict[str, tuple[float, str, list[str]]] = {}
    for worker in workers:
        outages = (worker.heartbeat or {}).get("unreachable")
        for outage in outages if isinstance(outages, list) else ():
            destination, since = str(outage.get("destination", "?")), float(outage.get("since", 0.0))
            first, error, names = found.get(destination, (since, str(outage.get("error", "")), []))
            found[destination] = (min(first, since), error, [*names, worker.worker_id])
    return sorted((Unreachable(destination, since, error, waiting, tuple(names))
                   for destination, (since, error, names) in found.items()), key=lambda u: u.since)


@dataclass(frozen=True, slots=True)
class OutsideWindow:
    """A destination a live pop daemon of the queue does not use now: outside its windows until ``opens``."""

    destination: str
    windows: str
    opens: float


def outside_windows(workers: Sequence[Worker]) -> list[OutsideWindow]:
    """The destinations the live pop daemons report outside their windows, one each, the soonest to open first."""
    found: dict[str, OutsideWindow] = {}
    for worker in workers:
        shut = (worker.heartbeat or {}).get("outside_window")
        for item in shut if isinstance(shut, list) else ():
            destination, opens = str(item.get("destination", "?")), float(item.get("opens", 0.0))
            if destination not in found or opens < found[destination].opens:
                found[destination] = OutsideWindow(destination, str(item.get("windows", "")), opens)
    return sorted(found.values(), key=lambda item: item.opens)


def replication_problems(status: ReplicationStatus) -> list[str]:
    """What is wrong with the master's replicas, sentinels or cluster, worst first (none: all is well)."""
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
    if status.cluster is not None and status.cluster.down:
        failing = ", ".join(f"{member.address} ({member.role})" for member in status.cluster.down)
        problems.append(f"cluster node(s) {failing} failing or unreachable")
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


async def rates(store: QueueStore, window: float = RATE_WINDOW) -> Rates:
    """Pushed, done and failed records per minute over the last ``window`` seconds, from the rates ring: a
    read that costs the same whatever the traffic."""
    counts, covered, complete = (await store.rate_history(window)).totals(window)
    per_minute = {kind: (counts[kind] * 60.0 / covered if covered > 0 else 0.0) for kind in RATES_REPORTED}
    return Rates(per_minute, window, covered, complete)
