"""Reaching the master through Redis Sentinel, and leaving a master the sentinels deposed.

A ``sentinel://host:port,host:port/master_name`` address (what :func:`sentinel_address` builds from
``[redis] sentinels`` and ``master_name``) gives a client from redis-py's own Sentinel support: its connection
pool asks the sentinels for the master before each new connection and drops the old master's connections when
a sentinel names another, and a connection that finds its master turned replica (``READONLY``) is dropped too.
Every client of dataq (daemons, CLI, leases, metrics) is a store client, so every one follows a fail-over by
itself; while the switch lasts, commands fail as StoreUnavailable and callers retry with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool

from dataq.addresses import host_port_text, parse_host_port
from dataq.config.redis_settings import DEFAULT_SENTINEL_PORT
from dataq.errors import StoreError

SENTINEL_SCHEME = "sentinel"


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """Where the sentinels are and which master they watch."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str

    @property
    def address(self) -> str:
        return sentinel_address(self.sentinels, self.master_name)


def client_address(client: aioredis.Redis) -> str:
    """``host:port`` of the server (or sentinel) a client talks to."""
    kwargs = client.connection_pool.connection_kwargs
    return host_port_text(kwargs.get("host"), kwargs.get("port"))


def sentinel_address(sentinels: tuple[tuple[str, int], ...], master_name: str) -> str:
    """``sentinel://h1:p1,h2:p2/name``: how logs and messages name a master found through Sentinel."""
    hosts = ",".join(host_port_text(host, port) for host, port in sentinels)
    return f"{SENTINEL_SCHEME}://{hosts}/{master_name}"


def parse_sentinel_address(url: str) -> SentinelTarget:
    """The target named by a ``sentinel://h1:p1,h2:p2/master_name`` address."""
    prefix = f"{SENTINEL_SCHEME}://"
    if not url.startswith(prefix):
        raise StoreError(f"{url!r} is not a sentinel:// address")
    hosts, _, name = url[len(prefix):].partition("/")
    name = unquote(name)
    if not hosts or not name:
        raise StoreError(f"sentinel address {url!r} must be sentinel://host:port[,host:port...]/master_name")
    try:
        sentinels = tuple(parse_host_port(part, DEFAULT_SENTINEL_PORT) for part in hosts.split(","))
    except ValueError as exc:
        raise StoreError(f"sentinel address {url!r}: {exc}") from exc
    return SentinelTarget(sentinels, name)


class SerialSentinel(Sentinel):
    """redis-py's Sentinel manager, asking the sentinels for the master one caller at a time, and saying what
    each sentinel answered when none names one.

    redis-py's ``discover_master`` moves the sentinel that answered to the front of its list with a swap made
    after an await; two callers at once (every connection a daemon opens after a fail-over asks) can then write
    one sentinel into two places and drop another from the list for good. A lock keeps the list a permutation.
    And its error, when no sentinel answers, is the repr of every sentinel's client with the error's class alone:
    a certificate the sentinels refuse, or a sentinel that speaks only TLS, reads as a bare ``ConnectionError``.
    This one is redis-py's loop with one line per sentinel, its address and the reason. One more difference: the
    sentinel that leads a fail-over lists the old master in ``SENTINEL MASTERS`` until the fail-over ends (while
    it reconfigures the replicas, up to ``failover-timeout``), and once that server answers again it looks
    healthy: redis-py would send clients back to it. Such a sentinel is passed over; the others name the new one.
    """

    def __init__(self, sentinels: list[tuple[str, int]], **kwargs: Any) -> None:
        super().__init__(sentinels, **kwargs)  # type: ignore[no-untyped-call]
        self._discovering = asyncio.Lock()

    async def discover_master(self, service_name: str) -> Any:
        async with self._discovering:
            reasons: list[str] = []
            for index, sentinel in enumerate(self.sentinels):
                try:
                    masters: dict[str, dict[str, Any]] = await sentinel.sentinel_masters()  # type: ignore[assignment]
                except (rexc.ConnectionError, rexc.TimeoutError) as exc:
                    reasons.append(f"{client_address(sentinel)}: {str(exc) or type(exc).__name__}")
                    continue
                state = masters.get(service_name)
                if state and "failover_in_progress" in state.get("flags", ""):
                    reasons.append(f"{client_address(sentinel)}: leads a fail-over of {service_name!r}")
                    continue
                if state and self.check_master_state(state, service_name):
                    # The sentinel that answered is asked first next time, as redis-py does.
                    self.sentinels[0], self.sentinels[index] = sentinel, self.sentinels[0]
                    return state["ip"], state["port"]
                reasons.append(f"{client_address(sentinel)}: no master {service_name!r} that is up")
            raise MasterNotFoundError(f"no sentinel names a master for {service_name!r} ({'; '.join(reasons)})")


def connect_sentinel(target: SentinelTarget, *, sentinel_options: dict[str, Any],
                     options: dict[str, Any]) -> tuple[aioredis.Redis, Sentinel]:
    """A client of the master that ``target``'s sentinels name (follows fail-overs), and the sentinel manager
    (which the caller closes: the client does not own it)."""
    manager = SerialSentinel(list(target.sentinels), sentinel_kwargs=sentinel_options, **options)
    return manager.master_for(target.master_name, redis_class=aioredis.Redis,
                              connection_pool_class=FollowingPool), manager


def deposed(pool: ConnectionPool, connection: AbstractConnection) -> bool:
    """Whether ``connection`` talks to a master the sentinels no longer name (as far as ``pool`` last asked).

    A deposed master may go on answering as a master: when the sentinels elect another while it is cut off or
    stopped, or a second fail-over follows the first, they reach it to make it a replica only some seconds later
    (ten and more here). redis-py asks the sentinels only when a connection connects, so connections made before
    would keep writing there: writes that no replica confirms and that its resync will throw away.
    """
    master = pool.master_address if isinstance(pool, SentinelConnectionPool) else None
    return master is not None and (getattr(connection, "host", None), getattr(connection, "port", None)) != tuple(
        master)


class FollowingPool(SentinelConnectionPool):
    """redis-py's Sentinel pool, that also closes a connection to a deposed master when it comes back.

    redis-py closes the idle connections when it learns of another master, but not those in use at that moment
    (its asyncio pool never checks on release whom a connection talks to): they would go back to the pool still
    connected to the old master.
    """

    async def release(self, connection: AbstractConnection) -> None:
        try:
            if deposed(self, connection):
                await connection.disconnect()
        finally:
            await super().release(connection)


async def follow_elected_master(pool: ConnectionPool) -> None:
    """Ask the sentinels which master they name now (a client not managed by Sentinel: nothing to do). When it is
    another, the idle connections are closed at once and those in use when they come back (:class:`FollowingPool`;
    the store's lane checks the ones it keeps before each use)."""
    if isinstance(pool, SentinelConnectionPool):
        with contextlib.suppress(rexc.RedisError):  # no sentinel to ask: the connections stay until they fail
            await pool.get_master_address()  # type: ignore[no-untyped-call]
