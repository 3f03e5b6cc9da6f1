"""The ``[redis]`` section: where Redis is (a URL, Sentinel, or the embedded server) and how safe a write must be.

Three ways to reach Redis, one at a time: ``url`` (one server, or a master with replicas that never fails over
by itself), ``sentinels`` with ``master_name`` (the master that Redis Sentinel elects, followed across
fail-overs), or neither (an embedded redis-server in ``data_dir``). ``min_replicas`` works with the first two.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataq.config.loader import MAX_PORT, Invalid, Section, setting, together

REDIS_URL_SCHEMES = ("redis", "rediss", "unix")
"""How dataq reaches Redis: plain TCP, TLS, or a unix socket."""
APPENDFSYNC_CHOICES = ("always", "everysec", "no")
DEFAULT_APPENDFSYNC = "always"
"""redis-server's ``appendfsync`` policies; ``always`` is the only one that loses no acknowledged record."""
DEFAULT_SENTINEL_PORT = 26379


def parse_host_port(text: str, default_port: int = DEFAULT_SENTINEL_PORT) -> tuple[str, int]:
    """``host:port``, ``[v6-address]:port`` or a bare host (the default port); a ValueError says what is wrong."""
    text = text.strip()
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} is not host:port ([v6-address]:port for IPv6)")
        port_text = rest[1:]
    elif text.count(":") > 1:
        raise ValueError(f"{text!r} is not host:port (write an IPv6 address as [address]:port)")
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise ValueError(f"{text!r} has no host")
    if not port_text and ":" not in text.rpartition("]")[2]:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) <= MAX_PORT:
        raise ValueError(f"{text!r} has no valid port (1-{MAX_PORT})")
    return host, int(port_text)


@dataclass(frozen=True, slots=True)
class RedisSettings(Section):
    """How dataq reaches Redis: an external server by URL, a master through Redis Sentinel, or an embedded
    redis-server in ``data_dir``."""

    url: str | None = None
    """``redis://``, ``rediss://`` or ``unix://`` URL; None (or "") runs an embedded redis-server."""
    ca_file: str | None = None
    """CA bundle that verifies a ``rediss://`` server (None: the system's CAs)."""
    cert_file: str | None = None
    """Client certificate for a ``rediss://`` server that asks for one (with ``key_file``)."""
    key_file: str | None = None
    """Private key of ``cert_file``."""
    socket_timeout: float = setting(5.0, gt=0)
    """Seconds a Redis command may take before the server counts as unavailable."""
    appendfsync: str = setting(DEFAULT_APPENDFSYNC, choices=APPENDFSYNC_CHOICES)
    """Embedded server only: when its append-only file is fsynced (``always`` loses no acknowledged record)."""
    sentinels: tuple[str, ...] = ()
    """``host:port`` of each Redis Sentinel watching the master (set: Redis is the master they name; no ``url``)."""
    master_name: str | None = None
    """The name the sentinels monitor the master under (``sentinel monitor NAME ...``); needed with sentinels."""
    sentinel_username: str | None = None
    """User the sentinels ask for (ACL), if any."""
    sentinel_password: str | None = None
    """Password the sentinels ask for (``requirepass`` of the sentinels), if any."""
    username: str | None = None
    """User of the master and replicas found through the sentinels, if any (with ``url``, put it in the URL)."""
    password: str | None = None
    """Password of the master and replicas found through the sentinels, if any (with ``url``, in the URL)."""
    min_replicas: int = setting(0, ge=0)
    """Replicas that must hold a write (push, ack, fail, range move) before it is acknowledged; 0: the master's."""
    replica_timeout: float = setting(1.0, gt=0)
    """Seconds a write waits for ``min_replicas`` replicas before it counts as not replicated (and is retried)."""

    def _check(self) -> None:
        if self.url is not None and not self.url.startswith(tuple(f"{scheme}://" for scheme in REDIS_URL_SCHEMES)):
            raise Invalid("url", f"{{key}} {self.url!r} must start with redis://, rediss:// or unix://")
        together(self, "cert_file", "key_file")
        if self.sentinels:
            if self.url is not None:
                raise Invalid("sentinels", "keys '{key}' and '{table}.url' exclude each other: with sentinels, "
                              "Redis is the master they name")
            if self.master_name is None:
                raise Invalid("master_name", "key '{key}' must be set with '{table}.sentinels' (the name in "
                              "'sentinel monitor NAME ...')")
            for address in self.sentinels:
                try:
                    parse_host_port(address)
                except ValueError as exc:
                    raise Invalid("sentinels", f"key '{{key}}': {exc}") from None
        else:
            for key in ("master_name", "sentinel_username", "sentinel_password", "username", "password"):
                if getattr(self, key) is not None:
                    raise Invalid(key, "key '{key}' needs '{table}.sentinels'")
            if self.min_replicas and self.url is None:
                raise Invalid("min_replicas", "key '{key}' needs replicas: set '{table}.url' or "
                              "'{table}.sentinels' (the embedded redis-server has none)")

    @property
    def embedded(self) -> bool:
        """Whether dataq runs its own redis-server (neither ``url`` nor ``sentinels`` is set)."""
        return self.url is None and not self.sentinels

    @property
    def sentinel_hosts(self) -> tuple[tuple[str, int], ...]:
        """``sentinels`` as (host, port) pairs."""
        return tuple(parse_host_port(address) for address in self.sentinels)
