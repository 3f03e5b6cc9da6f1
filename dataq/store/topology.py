"""Where a store's writes go: the master, its replicas and their lag, and the sentinels that elect the master or
the Redis Cluster it is one shard of."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis.exceptions as rexc

from dataq.addresses import host_port_text
from dataq.store.base import StoreBase
from dataq.store.connection import translated
from dataq.store.sentinel import client_address, follow_elected_master
from dataq.store.types import ClusterMember, ClusterStatus, Replica, ReplicationStatus

SLOTS = 16384
"""A Redis Cluster's hash slots; also what a master serving none sorts as."""
SENTINEL_PROBE_TIMEOUT = 2.0
"""Seconds a sentinel may take to answer PING before it counts as down."""


class TopologyOps(StoreBase):
    @property
    def highly_available(self) -> bool:
        """Whether this store is meant to survive the loss of its master (Sentinel, a cluster, or replicated
        writes)."""
        return self.sentinel is not None or self.cluster is not None or self.replication.enabled

    @translated
    async def memory_usage(self) -> tuple[int, int]:
        """Redis's ``used_memory`` and ``maxmemory`` (0: no limit set), in bytes."""
        info: dict[str, Any] = await self.r.info("memory")
        return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))

    @translated
    async def replication_status(self) -> ReplicationStatus:
        """The master (as the sentinels name it, or the URL's server), its replicas, and the sentinels."""
        # The sentinels' choice now, not the one this client's connections were made to; the daemons ask every
        # few seconds, so their connections also leave a deposed master that takes writes without replicas.
        with contextlib.suppress(TimeoutError):  # sentinels that drop packets: the status says which
            async with asyncio.timeout(SENTINEL_PROBE_TIMEOUT):
                await follow_elected_master(self.client.connection_pool)
        info: dict[str, Any] = await self.r.info("replication")
        master_offset = int(info.get("master_repl_offset", 0))
        replicas = []
        for index in range(int(info.get("connected_slaves", 0))):
            entry = info.get(f"slave{index}")
            if not isinstance(entry, dict):
                continue
            replicas.append(Replica(
                address=host_port_text(entry.get("ip"), entry.get("port")),
                state=str(entry.get("state", "?")),
                lag_bytes=max(0, master_offset - int(entry.get("offset", 0))),
                lag_seconds=int(entry["lag"]) if "lag" in entry else None,
            ))
        sentinels = None
        if self.sentinel is not None:
            # A copy: redis-py reorders its list (the sentinel that answers goes first) while others use it.
            clients = list(self.sentinel.sentinels)
            answers = await asyncio.gather(*(_answers(client) for client in clients))
            sentinels = {client_address(client): up for client, up in zip(clients, answers, strict=True)}
        cluster = None
        if self.cluster is not None:
            nodes = await self._lane.execute("CLUSTER", "NODES")
            cluster = ClusterStatus(self.cluster.slot, parse_cluster_nodes(str(nodes), self.cluster.slot))
        return ReplicationStatus(await self._master_address(), tuple(replicas), self.replication.min_replicas,
                                 sentinels, cluster)

    async def _master_address(self) -> str:
        pool = self.client.connection_pool
        master = getattr(pool, "master_address", None)
        if master:
            return host_port_text(*master)
        kwargs = pool.connection_kwargs
        return str(kwargs["path"]) if "path" in kwargs else host_port_text(kwargs.get("host"), kwargs.get("port"))


def parse_cluster_nodes(text: str, queue_slot: int) -> tuple[ClusterMember, ...]:
    """The members of ``CLUSTER NODES``' reply: ``<id> <ip:port@bus-port[,hostname]> <flags> <master id> <ping>
    <pong> <epoch> <link> <slot ranges>...`` per line, masters first (by their first slot), each followed by its
    replicas; the master whose ranges hold ``queue_slot`` holds the queue."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    addresses = {row[0]: row[1].split("@")[0] for row in rows}
    members: list[ClusterMember] = []
    first_slot: dict[str, int] = {}
    for node_id, _address, flags_text, master_id, _ping, _pong, _epoch, link, *slots in rows:
        flags = set(flags_text.split(","))
        master = "master" in flags
        served = [slot for slot in slots if not slot.startswith("[")]  # [slot->-id]: one being migrated
        ranges = [_slot_range(text) for text in served]
        address = addresses[node_id]
        if master:
            first_slot[address] = min((low for low, _ in ranges), default=SLOTS)
        members.append(ClusterMember(
            address=address,
            role="master" if master else "replica",
            master=None if master else addresses.get(master_id, master_id),
            slots=" ".join(served),
            up=not flags & {"fail", "fail?", "noaddr", "handshake"} and link == "connected",
            holds_queue=master and any(low <= queue_slot <= high for low, high in ranges),
        ))
    return tuple(sorted(members, key=lambda member: (first_slot.get(member.master or member.address, SLOTS),
                                                     member.master is not None, member.address)))


def _slot_range(text: str) -> tuple[int, int]:
    """``5461-10922`` or a single slot ``5461``."""
    low, _, high = text.partition("-")
    return int(low), int(high or low)


async def _answers(sentinel: Any) -> bool:
    try:
        async with asyncio.timeout(SENTINEL_PROBE_TIMEOUT):
            return bool(await sentinel.ping())
    except (rexc.RedisError, OSError, TimeoutError):
        return False

