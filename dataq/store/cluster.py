"""Redis Cluster: a queue's store talks to the master that holds the queue's slot, wherever that is.

Every key of a queue shares one hash tag (:mod:`dataq.keys`), so one slot, and so one master, holds the whole
queue; different queues spread over the masters. The store needs that master's own connections rather than a
client that routes each command by itself (redis-py's ``RedisCluster``): WAIT counts the replicas holding the
writes *of its connection*, so a replicated acknowledgement must share a connection with its write (per shard);
the scripts and MULTI run on one node; sharded pub/sub (``SSUBSCRIBE``) is served by the slot's master; and the
store's hot paths (:mod:`.lane`, :mod:`.replication`) send on pooled connections.

So the store's client is a plain one whose pool asks redis-py's cluster discovery (``RedisCluster``'s nodes
manager: the startup node of the URL, ``CLUSTER SLOTS``, the nodes it learns) which master holds the slot before
each new connection, as redis-py's Sentinel pool asks the sentinels. A connection that finds its node gone, or is
answered ``MOVED`` (a fail-over promoted a replica, or the slot was resharded), drops itself and has the map read
again; the caller sees StoreUnavailable and retries, as for any outage. ``MOVED``, ``ASK``, ``TRYAGAIN`` and
``CLUSTERDOWN`` are refusals: the command did not run, so nothing is done twice. A slot being migrated answers
``ASK`` for the keys already moved: the queue waits (StoreUnavailable) until the migration ends rather than run a
script over two nodes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, ConnectionPool, SSLConnection, parse_url

from dataq.errors import StoreError

REFRESH_MIN_INTERVAL = 0.1
"""Seconds between two readings of the cluster's map: after a fail-over every connection asks at once."""

Address = tuple[str, int]


class SlotMap:
    """Which master holds one slot, read through redis-py's cluster discovery and read again when found stale."""

    def __init__(self, cluster: RedisCluster, key: str) -> None:
        self._cluster = cluster
        self.key = key
        self.slot = cluster.keyslot(key)
        self._stale = True
        self._read_at = float("-inf")
        self._failure: rexc.ConnectionError | None = None
        self._reading = asyncio.Lock()

    def mark_stale(self) -> None:
        self._stale = True

    async def master(self) -> Address:
        """The address of the master holding the slot (ConnectionError while the map cannot be read)."""
        async with self._reading:
            if self._stale:
                await self._read()
            try:
                node = self._cluster.nodes_manager.get_node_from_slot(self.slot)
            except (rexc.RedisClusterException, LookupError) as exc:
                self._stale = True
                raise rexc.ConnectionError(f"no master holds slot {self.slot} of {self.key!r}: {exc}") from exc
        return node.host, int(node.port)

    async def close(self) -> None:
        await self._hang_up()

    async def _read(self) -> None:
        wait = self._read_at + REFRESH_MIN_INTERVAL - time.monotonic()
        if self._failure is not None and wait > 0:
            # Every connection of a daemon asks after a fail-over: one reading answers them all.
            raise self._failure
        await asyncio.sleep(max(0.0, wait))
        manager = self._cluster.nodes_manager
        known = dict(manager.startup_nodes)
        try:
            await manager.initialize()
        except Exception as exc:
            # Whatever went wrong (no node answers; one that is no cluster node, or knows no slots yet, which
            # redis-py reports as an IndexError after forgetting every node it knew), the nodes known before are
            # asked again next time: the map is retried like any outage, and the message says why.
            manager.startup_nodes = known
            self._failure = rexc.ConnectionError(f"cannot read the Redis Cluster's slots: {exc!r}")
            raise self._failure from exc
        finally:
            self._read_at = time.monotonic()
            await self._hang_up()
        self._failure = None
        self._stale = False

    async def _hang_up(self) -> None:
        """Close the connections the map was read through: it is read seldom, and nothing else uses them (the
        RedisCluster is never initialized as a client, so its own close would not close them)."""
        manager = self._cluster.nodes_manager
        nodes = {id(node): node for node in (*manager.startup_nodes.values(), *manager.nodes_cache.values())}
        await asyncio.gather(*(node.disconnect() for node in nodes.values()), return_exceptions=True)


class SlotConnectionPool(ConnectionPool):
    """Connections to the master holding one slot; idle ones to a former master are dropped when it changes."""

    def __init__(self, slots: SlotMap, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slots = slots
        self.master_address: Address | None = None

    def make_connection(self) -> Any:
        # Handed over after construction rather than in connection_kwargs, which the pool's repr prints whole.
        connection = super().make_connection()  # type: ignore[no-untyped-call]
        connection.slot_pool = self
        return connection

    async def current_master(self) -> Address:
        address = await self.slots.master()
        if address != self.master_address:
            self.master_address = address
            await self.disconnect(inuse_connections=False)
        return address


class SlotConnection(Connection):
    """A connection that finds its host in the slot map whenever it connects, and drops itself when told MOVED."""

    slot_pool: SlotConnectionPool

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        # Every way redis-py (re)connects comes through here: the pool, a send on a dropped connection, pub/sub.
        if not self.is_connected:
            self.host, self.port = await self.slot_pool.current_master()
        try:
            await super().connect_check_health(check_health, retry_socket_connect)
        except (rexc.ConnectionError, rexc.TimeoutError, OSError):
            self.slot_pool.slots.mark_stale()
            raise

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except (rexc.AskError, rexc.ClusterDownError, rexc.TryAgainError) as exc:
            # MOVED (an AskError) or ASK: the slot is no longer (all) here.
            self.slot_pool.slots.mark_stale()
            await self.disconnect()
            raise rexc.ConnectionError(f"the queue's slot is not on {self.host}:{self.port} now: {exc}") from exc
        except (rexc.ConnectionError, rexc.TimeoutError):
            self.slot_pool.slots.mark_stale()
            raise


class SlotSSLConnection(SlotConnection, SSLConnection):
    pass


def connect_cluster(url: str, key: str, options: dict[str, Any]) -> tuple[aioredis.Redis, SlotMap]:
    """A client of the master holding ``key``'s slot in the cluster that ``url`` (any node) belongs to, and the
    slot map it finds that master through (which the caller closes: the client does not own it)."""
    if not url.startswith(("redis://", "rediss://")):
        raise StoreError(f"a Redis Cluster is reached by a redis:// or rediss:// URL of one of its nodes, not {url!r}")
    tls = url.startswith("rediss://")
    cluster_options = {name: value for name, value in options.items()
                       if name not in ("retry", "health_check_interval")}
    try:
        # Full coverage is not this queue's business: its own slot is checked when its master is looked up.
        cluster = RedisCluster.from_url(url, require_full_coverage=False, **cluster_options)
        kwargs: dict[str, Any] = {**parse_url(url), **options}
    except (ValueError, rexc.RedisClusterException) as exc:
        raise StoreError(f"Redis URL {url!r} is invalid: {exc}") from exc
    for discovered in ("host", "port", "db"):
        kwargs.pop(discovered, None)
    kwargs["connection_class"] = SlotSSLConnection if tls else SlotConnection
    slots = SlotMap(cluster, key)
    return aioredis.Redis.from_pool(SlotConnectionPool(slots, **kwargs)), slots
