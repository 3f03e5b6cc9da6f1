"""The one way the store sends its scripts: on a few connections of the client's pool that it keeps.

Hand-written on purpose, and thin: redis-py's ``execute_command`` checks a connection out of the pool for every
command (a lock, three observability hooks, a readiness probe of the socket) and back in, which cost the push
daemon more CPU per record than its own work at window 1 (``bench/push_profile.py``). The lane keeps the
connections it used, packs its commands with hiredis (:func:`packed`) and reads replies with redis-py's parser,
so TLS, AUTH, Sentinel's master discovery and error replies behave exactly as through the client. It holds as
many connections as scripts ran at once at the busiest moment (the push daemon's pipeline depth, the pop
daemon's concurrency).

Several commands can go at once on one connection (:meth:`Lane.send`): a replicated write and its ``WAIT`` must
share one (:mod:`.replication`). A script is sent by its SHA; a server that does not have it (a new master after a
fail-over, one restarted without its AOF) is given its source with ``SCRIPT LOAD`` and asked again.
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rexc
from hiredis import pack_command
from redis.asyncio.connection import AbstractConnection

from dataq.store.sentinel import deposed

Command = tuple[Any, ...]


def packed(connection: AbstractConnection, commands: Sequence[Command]) -> list[bytes]:
    """The commands in Redis's protocol, packed by hiredis (one of dataq's requirements): redis-py's asyncio
    connections pack in Python, which cost a push daemon more than Redis spent on most of them
    (``bench/record_path.py``). What hiredis will not pack (a type it does not know, a string that is not UTF-8)
    goes to redis-py, which raises its own error for it; so does every command of a connection that encodes
    strings otherwise (a URL's ``encoding``), as hiredis writes UTF-8 alone."""
    encoder = connection.encoder
    if codecs.lookup(encoder.encoding).name == "utf-8" and encoder.encoding_errors == "strict":
        try:
            return [b"".join([pack_command(command) for command in commands])]
        except (TypeError, UnicodeEncodeError):
            pass
    return connection.pack_commands(commands)


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script as Redis runs it: its name (for errors and logs), its source, and the SHA it is sent by."""

    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())

    def call(self, keys: Sequence[str], args: Sequence[Any]) -> Command:
        return ("EVALSHA", self.sha, len(keys), *keys, *args)


class Lane:
    """Runs commands on connections it keeps between calls, one caller at a time per connection."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.pool = client.connection_pool
        self._idle: list[AbstractConnection] = []

    async def execute(self, *args: Any) -> Any:
        """Send one command and return its reply; an error reply raises redis-py's exception for it."""
        (reply,) = await self.send([args])
        if isinstance(reply, rexc.ResponseError):
            raise reply
        return reply

    async def run_script(self, script: Script, keys: Sequence[str], args: Sequence[Any], *,
                         before: Sequence[Command] = (), after: Sequence[Command] = (), last_takes: float = 0.0,
                         on_written: Callable[[], None] | None = None) -> list[Any]:
        """Run ``script`` between the commands ``before`` and ``after``, all sent at once on one connection, and
        return every reply (error replies as exceptions, not raised). ``on_written`` is called once the script's
        own reply is in, before the replies of ``after``; ``last_takes``: see :meth:`send`."""
        commands = [*before, script.call(keys, args), *after]
        at = len(before)

        def written(index: int, reply: Any) -> None:
            if index == at and on_written is not None and not isinstance(reply, Exception):
                on_written()

        replies = await self.send(commands, last_takes=last_takes, on_reply=written)
        if isinstance(replies[at], rexc.NoScriptError):
            await self.execute("SCRIPT", "LOAD", script.source)
            replies = await self.send(commands, last_takes=last_takes, on_reply=written)
        return replies

    async def send(self, commands: Sequence[Command], *, last_takes: float = 0.0,
                   on_reply: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Send ``commands`` at once on one connection and read every reply in order (an error reply is returned,
        not raised, so the connection stays in step). ``last_takes``: seconds the last command may take beyond
        the socket's timeout (``WAIT`` answers after up to its own timeout); ``on_reply(index, reply)`` as each
        reply comes in."""
        connection = await self._connection()
        replies: list[Any] = []
        try:
            # With its health check: a connection idle for longer than the interval is PINGed first, as the client
            # would, so a connection the network dropped meanwhile is replaced before anything is sent on it.
            await connection.send_packed_command(packed(connection, commands))
            for index in range(len(commands)):
                last = index == len(commands) - 1
                timeout = (connection.socket_timeout or 0) + last_takes if last and last_takes else None
                try:
                    reply = await connection.read_response(timeout=timeout)
                except rexc.ResponseError as exc:
                    reply = exc  # an error reply leaves the connection in step
                if timeout is not None and reply is None:
                    raise rexc.TimeoutError(f"no answer to {commands[-1][0]} in time")
                replies.append(reply)
                if on_reply is not None:
                    on_reply(index, reply)
        except BaseException:
            # Lost, timed out or cancelled between a command and its reply: the connection is out of step.
            await self._drop(connection)
            raise
        if any(isinstance(reply, rexc.ReadOnlyError) for reply in replies):
            # A master demoted by a fail-over: give the connection back so the pool finds the new master.
            await self._drop(connection)
        else:
            self._idle.append(connection)
        return replies

    async def _connection(self) -> AbstractConnection:
        """A kept connection, else one of the pool's; never one to a master the sentinels have deposed."""
        while self._idle:
            connection = self._idle.pop()
            if not deposed(self.pool, connection):
                return connection
            await self._drop(connection)
        return await self.pool.get_connection()  # type: ignore[no-untyped-call,no-any-return]

    async def close(self) -> None:
        """Give every kept connection back to the pool."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await self.pool.release(connection)

    async def _drop(self, connection: AbstractConnection) -> None:
        await connection.disconnect()
        await self.pool.release(connection)
