"""High availability: reaching the master through Redis Sentinel, and writes acknowledged by replicas.

**Sentinel.** A ``sentinel://host:port,host:port/master_name`` address (what :func:`sentinel_address` builds from
``[redis] sentinels`` and ``master_name``) gives a client from redis-py's own Sentinel support: its connection
pool asks the sentinels for the master before each new connection and drops the old master's connections when
a sentinel names another, and a connection that finds its master turned replica (``READONLY``) is dropped too.
Every client of dataq (daemons, CLI, leases, metrics) is a store client, so every one follows a fail-over by
itself; while the switch lasts, commands fail as StoreUnavailable and callers retry with backoff.

**Replicated writes.** With ``min_replicas`` > 0, a write that must survive a fail-over (a push batch, an ack or
fail, a range move) is sent with ``WAIT min_replicas timeout`` at once on one connection: WAIT counts the
replicas that hold the writes *of that connection*, so the write and its WAIT must share it. The script's reply
is read before WAIT's, so a writer learns that the master has its write while the replicas are still at it (the
push daemon then sends its next batch). This is hand-written on a pooled connection because redis-py's pipeline
hands back nothing before the last reply.
When WAIT falls short the write has happened on the master but is not safe: :class:`~dataq.errors.NotReplicated`
(a StoreUnavailable) lets the caller retry. A retried script may find its work already done and write nothing;
its WAIT would then count an empty connection as replicated, so the next replicated call after a shortfall adds
a one-field write of its own (``replica_retries`` in the queue's counters): any later write on the master
carries every earlier one in the replication stream, so its WAIT covers the unconfirmed one too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.sentinel import Sentinel
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from dataq.config import parse_host_port
from dataq.errors import NotReplicated, StoreError

SENTINEL_SCHEME = "sentinel"
REPLICA_RETRIES_FIELD = "replica_retries"
"""Counters field bumped by the write that re-confirms an earlier unconfirmed one (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """Where the sentinels are and which master they watch."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str

    @property
    def address(self) -> str:
        return sentinel_address(self.sentinels, self.master_name)


def sentinel_address(sentinels: tuple[tuple[str, int], ...], master_name: str) -> str:
    """``sentinel://h1:p1,h2:p2/name``: how logs and messages name a master found through Sentinel."""
    hosts = ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in sentinels)
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
        sentinels = tuple(parse_host_port(part) for part in hosts.split(","))
    except ValueError as exc:
        raise StoreError(f"sentinel address {url!r}: {exc}") from exc
    return SentinelTarget(sentinels, name)


class SerialSentinel(Sentinel):
    """redis-py's Sentinel manager, asking the sentinels for the master one caller at a time.

    ``discover_master`` moves the sentinel that answered to the front of its list with a swap made after an
    await; two callers at once (every connection a daemon opens after a fail-over asks) can then write one
    sentinel into two places and drop another from the list for good. A lock keeps the list a permutation.
    """

    def __init__(self, sentinels: list[tuple[str, int]], **kwargs: Any) -> None:
        super().__init__(sentinels, **kwargs)  # type: ignore[no-untyped-call]
        self._discovering = asyncio.Lock()

    async def discover_master(self, service_name: str) -> Any:
        async with self._discovering:
            return await super().discover_master(service_name)


def connect_sentinel(target: SentinelTarget, *, sentinel_options: dict[str, Any],
                     options: dict[str, Any]) -> tuple[aioredis.Redis, Sentinel]:
    """A client of the master that ``target``'s sentinels name (follows fail-overs), and the sentinel manager
    (which the caller closes: the client does not own it)."""
    manager = SerialSentinel(list(target.sentinels), sentinel_kwargs=sentinel_options, **options)
    return manager.master_for(target.master_name, redis_class=aioredis.Redis), manager


@dataclass(slots=True)
class Replication:
    """Makes chosen writes wait for ``min_replicas`` replicas (none when 0)."""

    min_replicas: int = 0
    timeout: float = 1.0
    _unconfirmed: bool = False

    @property
    def enabled(self) -> bool:
        return self.min_replicas > 0

    async def run(self, client: aioredis.Redis, script: AsyncScript, keys: list[str], args: list[Any],
                  counters_key: str, on_written: Callable[[], None] | None = None) -> Any:
        """Run ``script`` and WAIT for the replicas on one connection; NotReplicated when too few confirm.

        ``on_written`` is called as soon as the master has run the script, before the replicas confirm it: a
        writer that orders its writes (the push daemon's committer) may send the next one meanwhile.
        """
        commands: list[tuple[Any, ...]] = []
        if self._unconfirmed:
            commands.append(("HINCRBY", counters_key, REPLICA_RETRIES_FIELD, 1))
        commands.append(("EVALSHA", script.sha, len(keys), *keys, *args))
        commands.append(("WAIT", self.min_replicas, max(1, round(self.timeout * 1000))))
        try:
            replies = await self._send(client, commands, on_written)
            if isinstance(replies[-2], NoScriptError):
                # A master that never ran it (a new one after a fail-over, or one restarted without its AOF).
                await client.script_load(script.script)
                replies = await self._send(client, commands, on_written)
        except BaseException:
            # Whether the write landed is unknown: the next one must carry a write of its own.
            self._unconfirmed = True
            raise
        for reply in replies:
            if isinstance(reply, rexc.ResponseError):
                self._unconfirmed = True
                raise reply
        acknowledged = int(replies[-1])
        if acknowledged < self.min_replicas:
            self._unconfirmed = True
            raise NotReplicated(self.min_replicas, self.timeout, acknowledged)
        self._unconfirmed = False
        return replies[-2]

    async def _send(self, client: aioredis.Redis, commands: list[tuple[Any, ...]],
                    on_written: Callable[[], None] | None) -> list[Any]:
        """Send ``commands`` at once on one connection of the pool and read every reply (an error reply is
        returned, not raised, so the connection stays in step); ``on_written`` once the script's reply is in."""
        pool = client.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await connection.send_packed_command(connection.pack_commands(commands))
            replies: list[Any] = []
            for index in range(len(commands)):
                waiting = index == len(commands) - 1
                # WAIT answers after up to its own timeout: the socket's must not cut it short.
                read_timeout = (connection.socket_timeout or 0) + self.timeout if waiting else None
                try:
                    reply = await connection.read_response(timeout=read_timeout)
                except rexc.ResponseError as exc:
                    reply = exc
                if waiting and reply is None:
                    await connection.disconnect()
                    raise rexc.TimeoutError("no answer to WAIT in time")
                replies.append(reply)
                if index == len(commands) - 2 and on_written is not None and not isinstance(reply, Exception):
                    on_written()
            return replies
        finally:
            await pool.release(connection)
