"""The scripts' own connections: a few connections of the client's pool that the store keeps for its scripts.

Hand-written on purpose, and thin: redis-py's ``execute_command`` checks a connection out of the pool for every
command (a lock, three observability hooks, a readiness probe of the socket) and back in, which cost the push
daemon more CPU per record than its own work at window 1 (``bench/push_profile.py``). The lane keeps the
connections it used and sends on them with redis-py's own packing and reply parsing (hiredis when installed),
so TLS, AUTH, Sentinel's master discovery and error replies behave exactly as through the client. It holds as
many connections as scripts ran at once at the busiest moment (the push daemon's pipeline depth, the pop
daemon's concurrency).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.connection import AbstractConnection

from dataq.store.replication import deposed


class Lane:
    """Runs one command at a time per connection, on connections it keeps between calls."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._pool = client.connection_pool
        self._idle: list[AbstractConnection] = []

    async def execute(self, *args: Any) -> Any:
        """Send one command and return its reply; an error reply raises redis-py's exception for it."""
        connection = await self._connection()
        try:
            # With its health check: a connection idle for longer than the interval is PINGed first, as the client
            # would, so a connection the network dropped meanwhile is replaced before a script is sent on it.
            await connection.send_packed_command(connection.pack_command(*args))
            reply = await connection.read_response()
        except rexc.ResponseError as exc:
            if isinstance(exc, rexc.ReadOnlyError):
                # A master demoted by a fail-over: give the connection back so the pool finds the new master.
                await self._drop(connection)
            else:
                self._idle.append(connection)  # an error reply leaves the connection in step
            raise
        except BaseException:
            # Lost, timed out or cancelled between the command and its reply: the connection is out of step.
            await self._drop(connection)
            raise
        self._idle.append(connection)
        return reply

    async def _connection(self) -> AbstractConnection:
        """A kept connection, else one of the pool's; never one to a master the sentinels have deposed."""
        while self._idle:
            connection = self._idle.pop()
            if not deposed(self._pool, connection):
                return connection
            await self._drop(connection)
        return await self._pool.get_connection()  # type: ignore[no-untyped-call,no-any-return]

    async def close(self) -> None:
        """Give every kept connection back to the pool."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await self._pool.release(connection)

    async def _drop(self, connection: AbstractConnection) -> None:
        await connection.disconnect()
        await self._pool.release(connection)
