"""The ``[redis]`` section: where Redis is (a URL, Sentinel, or the embedded server) and how safe a write must be.

Three ways to reach Redis, one at a time: ``url`` (one server, or a master with replicas that never fails over
by itself; with ``cluster``, any node of a Redis Cluster), ``sentinels`` with ``master_name`` (the master that
Redis Sentinel elects, followed across fail-overs), or neither (an embedded redis-server in ``data_dir``).
``min_replicas`` works with the first two (per shard on a cluster).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from dataq.addresses import MAX_PORT, parse_host_port
from dataq.config.loader import Invalid, Section, setting, together

REDIS_URL_SCHEMES = ("redis", "rediss", "unix")
"""How dataq reaches Redis: plain TCP, TLS, or a unix socket."""
APPENDFSYNC_CHOICES = ("always", "everysec", "no")
DEFAULT_APPENDFSYNC = "always"
"""redis-server's ``appendfsync`` policies; ``always`` is the only one that loses no acknowledged record."""
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_REDIS_HOST = "127.0.0.1"
DEFAULT_REDIS_PORT = 6379
"""Where :meth:`RedisSettings.url_at` points when neither the caller nor ``url`` names the host or the port."""
URL_HOST_PATTERN = re.compile(r"[A-Za-z0-9._-]+|\[?[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]?")
"""A host name, an IPv4 address or an IPv6 address (bracketed or not): what may stand as the host of a URL."""


@dataclass(frozen=True, slots=True)
class RedisSettings(Section):
    """How dataq reaches Redis: an external server by URL, a master through Redis Sentinel, or an embedded
    redis-server in ``data_dir``."""

    url: str | None = None
    """``redis://``, ``rediss://`` or ``unix://`` URL; None (or "") runs an embedded redis-server."""
    ca_file: str | None = None
    """CA bundle that verifies a ``rediss://`` server, or the sentinels and servers of ``tls`` (None: the
    system's CAs)."""
    cert_file: str | None = None
    """Client certificate for a ``rediss://`` server (or ``tls`` sentinels and servers) that asks for one (with
    ``key_file``)."""
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
    tls: bool = False
    """With sentinels: speak TLS to the sentinels and to the servers they name, verified with ``ca_file``
    (``cert_file`` and ``key_file`` for servers that ask for a client certificate); with ``url``, ``rediss://``
    says it."""
    min_replicas: int = setting(0, ge=0)
    """Replicas that must hold a write (push, ack, fail, range move) before it is acknowledged; 0: the master's."""
    replica_timeout: float = setting(1.0, gt=0)
    """Seconds a write waits for ``min_replicas`` replicas before it counts as not replicated (and is retried)."""
    cluster: bool = False
    """``url`` is a node of a Redis Cluster: each queue lives on the master holding its slot, found and followed
    across fail-overs through the cluster's slot map."""

    def _check(self) -> None:
        if self.url is not None and not self.url.startswith(tuple(f"{scheme}://" for scheme in REDIS_URL_SCHEMES)):
            raise Invalid("url", f"{{key}} {self.url!r} must start with redis://, rediss:// or unix://")
        together(self, "cert_file", "key_file")
        if self.cluster:
            self._check_cluster()
        if self.sentinels:
            if self.url is not None:
                raise Invalid("sentinels", "keys '{key}' and '{table}.url' exclude each other: with sentinels, "
                              "Redis is the master they name")
            if self.master_name is None:
                raise Invalid("master_name", "key '{key}' must be set with '{table}.sentinels' (the name in "
                              "'sentinel monitor NAME ...')")
            for address in self.sentinels:
                try:
                    parse_host_port(address, DEFAULT_SENTINEL_PORT)
                except ValueError as exc:
                    raise Invalid("sentinels", f"key '{{key}}': {exc}") from None
            if not self.tls:
                for key in ("ca_file", "cert_file", "key_file"):
                    if getattr(self, key) is not None:
                        raise Invalid(key, "key '{key}' needs '{table}.tls = true' with sentinels (it applies to "
                                      "TLS connections only)")
        else:
            for key in ("master_name", "sentinel_username", "sentinel_password", "username", "password"):
                if getattr(self, key) is not None:
                    raise Invalid(key, "key '{key}' needs '{table}.sentinels'")
            if self.tls:
                raise Invalid("tls", "key '{key}' is for '{table}.sentinels': with '{table}.url', TLS is a "
                              "rediss:// URL (the embedded redis-server speaks no TLS)")
            if self.min_replicas and self.url is None:
                raise Invalid("min_replicas", "key '{key}' needs replicas: set '{table}.url' or "
                              "'{table}.sentinels' (the embedded redis-server has none)")

    def _check_cluster(self) -> None:
        if self.sentinels:
            raise Invalid("cluster", "keys '{key}' and '{table}.sentinels' exclude each other: a Redis Cluster "
                          "elects its masters itself")
        if self.url is None:
            raise Invalid("cluster", "key '{key}' needs '{table}.url', the address of one of the cluster's nodes "
                          "(the embedded redis-server is no cluster)")
        parts = urlsplit(self.url)
        if parts.scheme == "unix":
            raise Invalid("cluster", "key '{key}' needs a redis:// or rediss:// '{table}.url': the cluster's "
                          "nodes tell each other's addresses as host and port")
        database = parse_qs(parts.query).get("db", [parts.path.strip("/") or "0"])[-1]
        if database != "0":
            raise Invalid("url", f"key '{{key}}' names database {database!r}: a Redis Cluster has only "
                          "database 0")

    @property
    def embedded(self) -> bool:
        """Whether dataq runs its own redis-server (neither ``url`` nor ``sentinels`` is set)."""
        return self.url is None and not self.sentinels

    @property
    def sentinel_hosts(self) -> tuple[tuple[str, int], ...]:
        """``sentinels`` as (host, port) pairs."""
        return tuple(parse_host_port(address, DEFAULT_SENTINEL_PORT) for address in self.sentinels)

    def url_at(self, host: str | None = None, port: int | None = None) -> str:
        """The URL of the server at ``host``:``port``: the 2014 ``dataq_cli.py --host HOST --port PORT``.

        A host or port not given is ``url``'s, else 127.0.0.1 or 6379. Only they change: ``url``'s scheme
        (``rediss``: TLS), credentials and database stay (a ``unix://`` url keeps its credentials and database,
        over ``redis://``). Raises ValueError with ``sentinels`` (Redis is the master they name), or for a host or
        port that cannot be in a URL.
        """
        if self.sentinels:
            raise ValueError("the settings reach Redis through [redis] sentinels, which name the master; "
                             "a host and port cannot stand for them")
        if host is not None and URL_HOST_PATTERN.fullmatch(host) is None:
            raise ValueError(f"{host!r} is not a host name or an IP address")
        if port is not None and not 0 < port <= MAX_PORT:
            raise ValueError(f"port {port} is not between 1 and {MAX_PORT}")
        parts = urlsplit(self.url or "redis://")
        userinfo, _, _ = parts.netloc.rpartition("@")
        if parts.scheme == "unix":
            query = parse_qs(parts.query).get("db", ["0"])
            scheme, path, query_text, old_host, old_port = "redis", f"/{query[-1]}", "", None, None
        else:
            try:
                old_host, old_port = parts.hostname, parts.port
            except ValueError as exc:
                raise ValueError(f"[redis] url {self.url!r}: {exc}") from exc
            scheme, path, query_text = parts.scheme, parts.path if parts.path.strip("/") else "/0", parts.query
        host = (host or old_host or DEFAULT_REDIS_HOST).strip("[]")
        address = f"[{host}]" if ":" in host else host
        credentials = f"{userinfo}@" if userinfo else ""
        query_part = f"?{query_text}" if query_text else ""
        return f"{scheme}://{credentials}{address}:{port or old_port or DEFAULT_REDIS_PORT}{path}{query_part}"
