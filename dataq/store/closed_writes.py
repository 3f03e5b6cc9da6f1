"""A command written to a Redis connection whose transport is already closed fails as a lost connection.

redis-py (8.1.0, the newest release) writes to the transport without looking at it first. When the server goes
away, the event loop may close a pooled connection's transport before redis-py notices, and the next command on
that connection writes there. asyncio's own loop drops the bytes and the drain that follows raises
``ConnectionResetError``, which redis-py turns into its ``ConnectionError``, an outage the daemons wait out. uvloop,
the daemons' loop, raises ``RuntimeError`` from the write itself, which is no outage to any caller: a Redis restart
under the chaos test stopped a push daemon ("background task raised an unexpected error") instead of making it
wait.

redis-py fixed it upstream the same way (redis/redis-py#4288, merged after 8.1.0): look at the transport before
writing, with no suspension between the look and the write. Until a release has it, :func:`install` puts that
write path into every connection class (plain, TLS, Unix socket, Sentinel-managed, cluster), once, when the store
is imported; ``tests/unit/test_redis_internals.py`` holds the method it replaces to its signature.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable

from redis.asyncio.connection import AbstractConnection

REPLACED = AbstractConnection._send_packed_command
"""redis-py's own write (read before :func:`install` replaces it)."""


async def send_if_open(self: AbstractConnection, command: Iterable[bytes]) -> None:
    """redis-py's ``_send_packed_command``, that refuses a closed transport as the OS refuses a reset socket.

    redis-py calls it for every command when the connection has a ``socket_timeout``, and every dataq client has
    one (``[redis] socket_timeout`` must be above 0)."""
    writer = self._writer
    if writer is None or writer.transport.is_closing():
        # An OSError: redis-py's send_packed_command disconnects and raises its ConnectionError for it.
        raise ConnectionResetError(errno.ECONNRESET, "the connection was closed before the write")
    writer.writelines(command)
    await writer.drain()


def install() -> None:
    """Make :func:`send_if_open` every connection's write (idempotent)."""
    setattr(AbstractConnection, "_send_packed_command", send_if_open)  # noqa: B010 (mypy refuses a method assignment)
