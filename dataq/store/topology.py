"""Where a store's writes go: the master, its replicas and their lag, and the sentinels that elect the master."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.exceptions as rexc

from dataq.store.base import StoreBase
from dataq.store.connection import translated
from dataq.store.types import Replica, ReplicationStatus

SENTINEL_PROBE_TIMEOUT = 2.0
"""Seconds a sentinel may take to answer PING before it counts as down."""


class TopologyOps(StoreBase):
    @property
    def highly_available(self) -> bool:
        """Whether this store is meant to survive the loss of its master (Sentinel, or replicated writes)."""
        return self.sentinel is not None or self.replication.enabled

    @translated
    async def memory_usage(self) -> tuple[int, int]:
        """Redis's ``used_memory`` and ``maxmemory`` (0: no limit set), in bytes."""
        info: dict[str, Any] = await self.r.info("memory")
        return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))

    @translated
    async def replication_status(self) -> ReplicationStatus:
        """The master (as the sentinels name it, or the URL's server), its replicas, and the sentinels."""
        info: dict[str, Any] = await self.r.info("replication")
        master_offset = int(info.get("master_repl_offset", 0))
        replicas = []
        for index in range(int(info.get("connected_slaves", 0))):
            entry = info.get(f"slave{index}")
            if not isinstance(entry, dict):
                continue
            replicas.append(Replica(
                address=_address(entry.get("ip"), entry.get("port")),
                state=str(entry.get("state", "?")),
                lag_bytes=max(0, master_offset - int(entry.get("offset", 0))),
                lag_seconds=int(entry["lag"]) if "lag" in entry else None,
            ))
        sentinels = None
        if self.sentinel is not None:
            # A copy: redis-py reorders its list (the sentinel that answers goes first) while others use it.
            clients = list(self.sentinel.sentinels)
            answers = await asyncio.gather(*(_answers(client) for client in clients))
            sentinels = {_address(*_host_port(client)): up for client, up in zip(clients, answers, strict=True)}
        return ReplicationStatus(await self._master_address(), tuple(replicas), self.replication.min_replicas,
                                 sentinels)

    async def _master_address(self) -> str:
        pool = self.client.connection_pool
        master = getattr(pool, "master_address", None)
        if master:
            return _address(*master)
        kwargs = pool.connection_kwargs
        return str(kwargs["path"]) if "path" in kwargs else _address(kwargs.get("host"), kwargs.get("port"))


async def _answers(sentinel: Any) -> bool:
    try:
        return bool(await asyncio.wait_for(sentinel.ping(), SENTINEL_PROBE_TIMEOUT))
    except (rexc.RedisError, OSError, TimeoutError):
        return False


def _host_port(client: Any) -> tuple[str, int]:
    kwargs = client.connection_pool.connection_kwargs
    return kwargs["host"], kwargs["port"]


def _address(host: object, port: object) -> str:
    text = str(host)
    return f"[{text}]:{port}" if ":" in text else f"{text}:{port}"
