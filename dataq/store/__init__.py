"""The queue store: the only code in dataq that speaks Redis (with its Lua scripts in ``lua/``).

Key names come from :mod:`dataq.keys`; redis-py errors leave as dataq errors (:mod:`.connection`).
"""

from __future__ import annotations

from dataq.activities import Plan, plan_for
from dataq.config import Settings
from dataq.config.queue_settings import DEFAULT_SEARCH_NAMES
from dataq.keys import QueueKeys
from dataq.store.audits import AuditOps
from dataq.store.base import NOTICE_WORK
from dataq.store.cluster import connect_cluster
from dataq.store.connection import client_options, connect
from dataq.store.custody import CustodyEntry, CustodyStep, Known, LastAnswer, Tracked
from dataq.store.custody_codes import Step, TrackedState
from dataq.store.inspect import InspectOps
from dataq.store.lease import LeaseOps
from dataq.store.names import NameHit, NameOps, NameQuery
from dataq.store.rate_ring import RATE_KINDS
from dataq.store.rates import RateBucket, RateHistory, RateOps
from dataq.store.remembered import DEFAULT_REMEMBER_DONE, Lost
from dataq.store.replication import Replication
from dataq.store.sentinel import (
    SENTINEL_SCHEME,
    SentinelTarget,
    connect_sentinel,
    parse_sentinel_address,
    sentinel_address,
)
from dataq.store.topology import TopologyOps
from dataq.store.types import (
    Claim,
    ClaimStatus,
    ClusterMember,
    ClusterStatus,
    Event,
    FailOutcome,
    Failures,
    Flag,
    PushResult,
    QueueList,
    Reclaimed,
    RecordState,
    RecordView,
    Replica,
    ReplicationStatus,
    RetryPolicy,
    Summary,
    Worker,
)


class QueueStore(AuditOps, InspectOps, LeaseOps, NameOps, TopologyOps, RateOps):
    """One queue in Redis: every operation the daemons, the actions and the CLI need."""

    @classmethod
    def open(cls, settings: Settings, url: str, queue: str) -> QueueStore:
        """A store for ``queue`` on ``url`` (or the ``sentinel://`` address of :func:`redis_address`; with
        ``cluster``, any node of the cluster) with the settings' TLS options (URLs), credentials (sentinels),
        timeouts, replication and event limits."""
        redis = settings.redis
        replication = Replication(redis.min_replicas, redis.replica_timeout)
        configured = settings.queue(queue) if queue in settings.queues else None
        remember_done = configured.remember_done if configured else DEFAULT_REMEMBER_DONE
        plan = plan_for(configured) if configured else None
        search_names = configured.search_names if configured else DEFAULT_SEARCH_NAMES
        if url.startswith(f"{SENTINEL_SCHEME}://"):
            base = client_options(tls=redis.tls, ca_file=redis.ca_file, cert_file=redis.cert_file,
                                  key_file=redis.key_file, socket_timeout=redis.socket_timeout)
            if redis.tls:
                # redis-py picks its TLS connection classes (the sentinels' and the master's) by this flag.
                base["ssl"] = True
            sentinel_options = {**base, "username": redis.sentinel_username, "password": redis.sentinel_password}
            options = {**base, "username": redis.username, "password": redis.password}
            client, sentinel = connect_sentinel(parse_sentinel_address(url), sentinel_options=sentinel_options,
                                                options=options)
            return cls(client, queue, events_max_len=settings.events.max_len, replication=replication,
                       remember_done=remember_done, plan=plan, search_names=search_names,
                       sentinel=sentinel)
        if redis.cluster:
            options = client_options(tls=url.startswith("rediss://"), ca_file=redis.ca_file,
                                     cert_file=redis.cert_file, key_file=redis.key_file,
                                     socket_timeout=redis.socket_timeout)
            client, slots = connect_cluster(url, QueueKeys(queue).records, options)
            return cls(client, queue, events_max_len=settings.events.max_len, replication=replication,
                       remember_done=remember_done, plan=plan, search_names=search_names,
                       cluster=slots)
        client = connect(url, ca_file=redis.ca_file, cert_file=redis.cert_file, key_file=redis.key_file,
                         socket_timeout=redis.socket_timeout)
        return cls(client, queue, events_max_len=settings.events.max_len, replication=replication,
                   remember_done=remember_done, plan=plan, search_names=search_names)

    @classmethod
    def from_url(
        cls,
        url: str,
        queue: str,
        *,
        events_max_len: int | None = None,
        remember_done: float = DEFAULT_REMEMBER_DONE,
        plan: Plan | None = None,
        search_names: int = DEFAULT_SEARCH_NAMES,
        **connect_options: object,
    ) -> QueueStore:
        client = connect(url, **connect_options)  # type: ignore[arg-type]
        if events_max_len is None:
            return cls(client, queue, remember_done=remember_done, plan=plan, search_names=search_names)
        return cls(client, queue, events_max_len=events_max_len, remember_done=remember_done, plan=plan,
                   search_names=search_names)


def redis_address(settings: Settings) -> str | None:
    """The ``sentinel://`` address of the configured sentinels, or None when none are configured."""
    redis = settings.redis
    if not redis.sentinels or redis.master_name is None:
        return None
    return sentinel_address(redis.sentinel_hosts, redis.master_name)


__all__ = [
    "NOTICE_WORK",
    "RATE_KINDS",
    "Claim",
    "ClaimStatus",
    "ClusterMember",
    "ClusterStatus",
    "CustodyEntry",
    "CustodyStep",
    "Event",
    "FailOutcome",
    "Failures",
    "Flag",
    "Known",
    "LastAnswer",
    "Lost",
    "NameHit",
    "NameQuery",
    "PushResult",
    "QueueList",
    "QueueStore",
    "RateBucket",
    "RateHistory",
    "Reclaimed",
    "RecordState",
    "RecordView",
    "Replica",
    "ReplicationStatus",
    "RetryPolicy",
    "SentinelTarget",
    "Step",
    "Summary",
    "Tracked",
    "TrackedState",
    "Worker",
    "connect",
    "redis_address",
]
