"""What the store's operations return."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from dataq.config import QueueSettings
from dataq.record import Record


class Flag(enum.StrEnum):
    """The two switches of a queue (the seed's ``readFlag`` and ``actionFlag``)."""

    READ = "read"
    ACTION = "action"


class QueueList(enum.StrEnum):
    """The lists an operator addresses by name."""

    ACTIVE = "active"
    INACTIVE = "inactive"


class FailOutcome(enum.StrEnum):
    """What became of a record whose action failed."""

    RETRY = "r"
    DELAYED = "d"
    INACTIVE = "i"
    NOT_OWNED = "-"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a failed record runs again: at once, or after a delay that grows with its failures.

    The delay after a record's n-th failure is ``min(max_delay, delay * backoff ** (n - 1))``, shortened at
    random by up to ``jitter`` of itself (so records failed together do not all fall due together).
    """

    delay: float = 0.0
    """Seconds before the first retry; 0: retried at once, never delayed."""
    backoff: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.2

    @classmethod
    def of(cls, queue: QueueSettings) -> RetryPolicy:
        return cls(queue.retry_delay, queue.retry_backoff, queue.retry_max_delay)


class ClaimStatus(enum.Enum):
    OK = "ok"
    ACTION_OFF = "off"
    UNREGISTERED = "unregistered"


@dataclass(frozen=True, slots=True)
class PushResult:
    """Per record, in order: True if stored and queued, False if its id was already tracked."""

    pushed: list[bool]
    active_length: int


@dataclass(frozen=True, slots=True)
class Claim:
    status: ClaimStatus
    records: list[Record] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """Records a dead (or departing) worker gave back."""

    returned: int
    deactivated: int


@dataclass(frozen=True, slots=True)
class Summary:
    """Counts of one queue, each read in O(1)."""

    queue: str
    active: int
    inactive: int
    delayed: int
    in_flight: int
    tracked: int
    action: bool
    read: bool
    workers: int
    counters: dict[str, int]
    custody: int = 0
    """Records handed on and not confirmed by the end of the chain yet (:mod:`dataq.store.custody`)."""
    custody_since: float | None = None
    """When the oldest of them was first handed on (None: custody is empty)."""
    custody_sites: dict[str, int] = field(default_factory=dict)
    """Records in custody per next site (``""``: waiting in the hand-on spool)."""
    activities: dict[str, int] = field(default_factory=dict)
    """Records queued per activity, in the order served (empty: the queue has none but ``default``)."""


@dataclass(frozen=True, slots=True)
class RecordState:
    """A tracked record with where it stands and its failure history."""

    record: Record
    where: str
    """``active``, ``inactive``, ``delayed`` or ``in-flight``."""
    errors: int
    crashes: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class Failures:
    """A record's failure history, as ``--list inactive`` and ``--show`` print it."""

    errors: int
    """Action failures counted (transient ones are not)."""
    crashes: int
    """Times its worker died while running it."""
    last_error: str | None


@dataclass(frozen=True, slots=True)
class RecordView:
    """Everything about one record (``dataq-cli --show``)."""

    record_id: str
    record: Record | None
    """None once the record is no longer tracked (done, deleted, cleared) or was never pushed."""
    where: str
    """``active``, ``inactive``, ``delayed``, ``in-flight``, ``done`` (acknowledged, as its events say) or
    ``unknown``."""
    place: int | None
    """In the active list: its place in its activity's run order, 1 = next to run."""
    active_length: int
    """The length of the active list it waits in (default's when it waits in none)."""
    worker: str | None
    """In flight: the worker that holds it."""
    due: float | None
    """Delayed: when it runs again (wall clock)."""
    failures: Failures
    events: list[Event]
    """Its events still in the stream, oldest first."""
    before: int = 0
    """In the active list: records queued in the activities served before its own (:mod:`dataq.activities`)."""


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a queue's event stream."""

    event_id: str
    """The stream entry id, ``<ms>-<seq>``."""
    time: float
    kind: str
    record_id: str
    detail: str


@dataclass(frozen=True, slots=True)
class Worker:
    """A registered daemon and its last heartbeat (None once the heartbeat has expired)."""

    worker_id: str
    info: dict[str, object]
    heartbeat: dict[str, object] | None


@dataclass(frozen=True, slots=True)
class Replica:
    """A replica as its master sees it."""

    address: str
    state: str
    """``online`` once it streams from the master; ``wait_bgsave``, ``send_bulk``... while it syncs."""
    lag_bytes: int
    """How far its acknowledged offset is behind the master's."""
    lag_seconds: int | None
    """Seconds since its last acknowledgement."""


@dataclass(frozen=True, slots=True)
class ClusterMember:
    """A node of a Redis Cluster as ``CLUSTER NODES`` describes it."""

    address: str
    role: str
    """``master`` or ``replica``."""
    master: str | None
    """A replica's master (its address), None for a master."""
    slots: str
    """The slot ranges a master serves (``0-5460``), empty for a replica."""
    up: bool
    """False when the cluster flags it failing (``fail`` or ``fail?``) or its link is down."""
    holds_queue: bool
    """Whether it is the master serving the queue's slot."""


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """The Redis Cluster a queue lives in: the queue's slot and every node."""

    slot: int
    members: tuple[ClusterMember, ...]

    @property
    def masters(self) -> int:
        return sum(1 for member in self.members if member.role == "master")

    @property
    def down(self) -> tuple[ClusterMember, ...]:
        return tuple(member for member in self.members if not member.up)


@dataclass(frozen=True, slots=True)
class ReplicationStatus:
    """The master a store writes to, its replicas, and the sentinels (when Redis is found through them) or the
    cluster (when the master is one shard of a Redis Cluster)."""

    master: str
    replicas: tuple[Replica, ...]
    min_replicas: int
    sentinels: dict[str, bool] | None
    """Each configured sentinel and whether it answers; None without Sentinel."""
    cluster: ClusterStatus | None = None
    """The cluster's nodes, as the queue's master sees them; None outside a cluster."""

    @property
    def online(self) -> int:
        """Replicas streaming from the master (the ones WAIT can count on)."""
        return sum(1 for replica in self.replicas if replica.state == "online")

    @property
    def sentinels_up(self) -> int:
        return sum(self.sentinels.values()) if self.sentinels else 0
