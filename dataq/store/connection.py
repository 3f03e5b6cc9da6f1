"""Connecting to Redis, loading the Lua scripts, and turning redis-py errors into dataq errors.

This is the boundary: nothing above the store sees a redis-py exception. A lost or refused connection, a
timeout, or a server still loading its AOF all become :class:`~dataq.errors.StoreUnavailable`, which callers
retry with backoff. redis-py's own retries are switched off: a script whose reply was lost may or may not have
run, and only the caller knows whether re-running it is safe.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlparse

import redis
import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.retry import Retry as SyncRetry

from dataq.config import REDIS_URL_SCHEMES
from dataq.errors import RangeError, StoreError, StoreUnavailable
from dataq.store import closed_writes
from dataq.store.custody_codes import lua_constants as custody_constants
from dataq.store.lane import Script
from dataq.store.rate_ring import lua_constants

DEFAULT_SOCKET_TIMEOUT = 5.0
SCRIPT_NAMES = (
    "push_batch",
    "claim",
    "ack",
    "fail",
    "promote",
    "postpone",
    "reclaim",
    "move_range",
    "activate_all",
    "clear",
    "forget_done",
    "mark_lost",
    "set_flag",
    "heartbeat",
    "custody_keep",
    "custody_step",
    "receipts",
    "adopt",
    "sample_age",
)
SCRIPT_LIBRARIES = ("rates", "stored", "activities")
"""The files of ``lua/lib/`` put before every script, in this order."""
_RANGE_ERROR_PREFIX = "DQRANGE "

closed_writes.install()

P = ParamSpec("P")
T = TypeVar("T")


def client_options(
    *,
    tls: bool = False,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
) -> dict[str, Any]:
    """The options every dataq client of a Redis server gets (a URL's own, or a sentinel-found master's)."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 30,
    }
    if tls:
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        if ca_file:
            options["ssl_ca_certs"] = ca_file
        if cert_file:
            options["ssl_certfile"] = cert_file
        if key_file:
            options["ssl_keyfile"] = key_file
    return options


def connect(
    url: str,
    *,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
) -> aioredis.Redis:
    """The one place a client of a Redis URL is built: ``redis://``, ``rediss://`` (TLS) or ``unix://``."""
    scheme = urlparse(url).scheme
    if scheme not in REDIS_URL_SCHEMES:
        raise StoreError(f"Redis URL {url!r} must start with redis://, rediss:// or unix://")
    options = client_options(tls=scheme == "rediss", ca_file=ca_file, cert_file=cert_file, key_file=key_file,
                             socket_timeout=socket_timeout)
    try:
        return aioredis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise StoreError(f"Redis URL {url!r} is invalid: {exc}") from exc


def server_pid(url: str, timeout: float) -> int | None:
    """The process id of the server answering PING at ``url``, or None if none answers (or it is loading).

    Blocking: the embedded server's supervisor asks it while it waits for its own child to come up, and compares
    pids because another server may answer on a port the child failed to bind.
    """
    client = redis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=SyncRetry(NoBackoff(), 0)
    )
    try:
        if not client.ping():
            return None
        info = client.info("server")
    except redis.RedisError:
        return None
    finally:
        client.close()
    pid = info.get("process_id")
    return pid if isinstance(pid, int) else None


def script_source(name: str) -> str:
    """The text Redis runs for script ``name``: the constants the store shares with the scripts, the libraries of
    ``lua/lib/`` (functions the scripts share; Redis has no include), then the script itself."""
    package = resources.files("dataq.store") / "lua"
    libraries = [(package / "lib" / f"{library}.lua").read_text() for library in SCRIPT_LIBRARIES]
    return "\n".join([lua_constants(), custody_constants(), *libraries, (package / f"{name}.lua").read_text()])


def load_scripts() -> dict[str, Script]:
    """Every Lua script, read once (the store sends each by SHA, loading it into a server that lacks it)."""
    return {name: Script(name, script_source(name)) for name in SCRIPT_NAMES}


def translate(exc: Exception) -> Exception:
    """The dataq error for a redis-py error (or the error itself when it is not one)."""
    if isinstance(exc, (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, OSError)):
        return StoreUnavailable(f"Redis is unavailable: {exc}")
    if isinstance(exc, rexc.ReadOnlyError):
        # A master turned replica by a fail-over that this client has not followed yet.
        return StoreUnavailable(f"Redis is unavailable: READONLY {exc}")
    if isinstance(exc, rexc.ResponseError):
        message = str(exc)
        if message.startswith(_RANGE_ERROR_PREFIX):
            return RangeError(message[len(_RANGE_ERROR_PREFIX) :])
        if message.startswith(("LOADING", "MASTERDOWN", "READONLY", "NOREPLICAS", "TRYAGAIN", "CLUSTERDOWN", "BUSY ")):
            return StoreUnavailable(f"Redis is unavailable: {message}")
        return StoreError(f"Redis refused the operation: {message}")
    if isinstance(exc, rexc.RedisError):
        return StoreError(f"Redis error: {exc}")
    return exc


def translated(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Decorate a store coroutine so redis-py errors leave it as dataq errors."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except (rexc.RedisError, OSError) as exc:
            raise translate(exc) from exc

    return wrapper
