"""Settings: one TOML file plus environment overrides, loaded into frozen dataclasses and validated.

:func:`load_settings` reads the file given (``--config``), else ``$DATAQ_CONFIG`` ("" = none at all), else the
system's ``/etc/dataq/dataq.toml`` when it exists, else none (all defaults), then applies these overrides, each
validated like the key it sets (errors name the variable):

``DATAQ_REDIS_URL`` -> ``redis.url`` ("" = embedded redis-server), ``DATAQ_DATA_DIR`` -> ``data_dir``,
``DATAQ_LOG_DIR`` -> ``log.dir``, ``DATAQ_LOG_LEVEL`` -> ``log.level``, ``DATAQ_PUSH_HOST`` -> ``push.host``,
``DATAQ_PUSH_PORT`` -> ``push.port``.

Every mistake is a ConfigError naming the file (or variable), the dotted key and what was expected; unknown keys
are errors with a suggestion. TOML has no null, so ``""`` in an optional key means "not set". An integer is
accepted where a number is expected, a boolean never where an integer is. ``data_dir`` and ``log.dir`` must be
absolute (daemons run from ``/``). Action options (``[queues.NAME.ACTION]``) are kept raw but frozen: tables
become read-only mappings, arrays become tuples. ``config/dataq.toml`` documents every key.

One generic loader walks a section dataclass's fields, so a new section (smtp, metrics) is added by declaring a
dataclass and a field of :class:`Settings`; bounds go on the field (``setting``), rules over several fields in
the section's ``_check``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dataq.addresses import MAX_PORT
from dataq.config.audit_settings import AuditSettings
from dataq.config.feed_settings import FeedSettings
from dataq.config.loader import (
    FILLED,
    ROLE_KEY,
    Invalid,
    Origins,
    Section,
    absolute,
    load_section,
    read_toml,
    setting,
    together,
)
from dataq.config.operators import HealthSettings, MailSettings, MetricsSettings, WebSettings
from dataq.config.queue_settings import QueueSettings
from dataq.config.redis_settings import RedisSettings
from dataq.errors import ConfigError
from dataq.logs import LOG_FORMATS, LOG_LEVELS, SYSTEM_LOG_DIR
from dataq.record import SITE_PATTERN

CONFIG_ENV = "DATAQ_CONFIG"
"""Names the settings file when :func:`load_settings` gets no path; set and empty, no file is read at all."""
SYSTEM_CONFIG = "/etc/dataq/dataq.toml"
"""The system's settings file (``make install-systemd`` installs it, the units name it), read when neither
``--config`` nor ``$DATAQ_CONFIG`` names one: so ``dataq-cli --summary`` on a host run by systemd finds its Redis."""
REDIS_URL_ENV = "DATAQ_REDIS_URL"
"""Overrides ``redis.url``: how ``dataq run`` points its daemons at the server it found or started."""
ENV_OVERRIDES: Mapping[str, str] = MappingProxyType({
    REDIS_URL_ENV: "redis.url", "DATAQ_DATA_DIR": "data_dir", "DATAQ_LOG_DIR": "log.dir",
    "DATAQ_LOG_LEVEL": "log.level", "DATAQ_PUSH_HOST": "push.host", "DATAQ_PUSH_PORT": "push.port",
})
"""Environment variable -> the dotted key it overrides."""
DEFAULT_QUEUE = "transfer"
"""The one queue configured when the file defines none (the 2014 data-q's only queue)."""
MIN_LINE_BYTES = 256
"""The smallest ``push.max_line_bytes``: shorter lines could not hold a record with a realistic path."""


RESUME_MEMORY_FRACTION = 0.9
"""``[push] resume_memory`` when unset: nine tenths of ``max_memory``."""


def heartbeat_rule(section: PushSettings | PopSettings) -> None:
    """A heartbeat must outlive the interval between two beats, or a live daemon would look dead."""
    if section.heartbeat_ttl <= section.heartbeat_interval:
        raise Invalid("heartbeat_ttl", f"key '{{key}}' ({section.heartbeat_ttl}) must be greater than "
                      f"{{table}}.heartbeat_interval ({section.heartbeat_interval})")


@dataclass(frozen=True, slots=True)
class PushSettings(Section):
    """The push daemon: the TCP listener feeders send record lines to."""

    host: str = "127.0.0.1"
    """Address to listen on (``0.0.0.0`` or ``::`` for every interface)."""
    port: int = setting(9988, ge=0, le=MAX_PORT)
    """Port of each queue without its own ``push_port`` (0: an ephemeral port, for tests)."""
    max_line_bytes: int = setting(65536, ge=MIN_LINE_BYTES)
    """Longest record line accepted; a longer one is refused and the connection closed."""
    idle_timeout: float = setting(300.0, gt=0)
    """Seconds a feeder connection may stay silent before it is closed."""
    max_connections: int = setting(1024, ge=1)
    """Feeder connections served at once."""
    batch_max: int = setting(1000, ge=1)
    """Most records written in one group commit."""
    tls_cert: str | None = None
    """Server certificate: set it (with ``tls_key``) to accept feeders over TLS only."""
    tls_key: str | None = None
    """Private key of ``tls_cert``."""
    tls_ca: str | None = None
    """CA that feeders' client certificates must chain to (None: no client certificate asked for)."""
    resume_below: int | None = setting(None, ge=0)
    """Low-water mark: turn ``read`` back on when the active queue falls below it (None: never automatically)."""
    max_memory: float | None = setting(None, gt=0)
    """Turn ``read`` off when Redis's ``used_memory`` passes this: a fraction of its ``maxmemory`` when at most 1,
    else bytes (None: never)."""
    resume_memory: float | None = setting(None, gt=0)
    """Turn ``read`` back on below this, in the unit of ``max_memory`` (None: nine tenths of ``max_memory``)."""
    heartbeat_interval: float = setting(1.0, gt=0)
    """Seconds between two heartbeats of the daemon in the worker registry."""
    heartbeat_ttl: float = setting(10.0, gt=0)
    """Seconds without a heartbeat after which the daemon counts as dead (``dataq-cli --health`` says so)."""

    def memory_limits(self, maxmemory: int) -> tuple[int, int] | None:
        """(turn read off at, turn it back on below) in bytes, for a Redis whose ``maxmemory`` is given (0: none
        set); None when there is no limit to watch (none configured, or a fraction of a maxmemory of 0)."""
        if self.max_memory is None:
            return None
        resume = self.resume_memory if self.resume_memory is not None else self.max_memory * RESUME_MEMORY_FRACTION
        if self.max_memory > 1:
            return int(self.max_memory), int(resume)
        if maxmemory <= 0:
            return None
        return int(self.max_memory * maxmemory), int(resume * maxmemory)

    def _check(self) -> None:
        heartbeat_rule(self)
        if not self.host:
            raise Invalid("host", "key '{key}' must not be empty (use 0.0.0.0 or :: for every interface)")
        together(self, "tls_cert", "tls_key")
        if self.resume_memory is not None:
            if self.max_memory is None:
                raise Invalid("resume_memory", "key '{key}' needs '{table}.max_memory'")
            if (self.resume_memory <= 1) != (self.max_memory <= 1):
                raise Invalid("resume_memory", f"key '{{key}}' ({self.resume_memory:g}) and '{{table}}.max_memory' "
                              f"({self.max_memory:g}) must both be fractions of maxmemory (at most 1) or both bytes")
            if self.resume_memory >= self.max_memory:
                raise Invalid("resume_memory", f"key '{{key}}' ({self.resume_memory:g}) must be less than "
                              f"'{{table}}.max_memory' ({self.max_memory:g})")
        if self.tls_ca is not None and self.tls_cert is None:
            raise Invalid("tls_ca", "key '{key}' needs '{table}.tls_cert' and '{table}.tls_key'")


@dataclass(frozen=True, slots=True)
class PopSettings(Section):
    """The pop daemon: workers that claim records and run the queue's actions on them."""

    concurrency: int = setting(4, ge=1)
    """Records run at once by one daemon (raised to what the queue's batching actions need to fill their batches
    in flight: four times network_move's batch_size in use, with the next batch that gathers meanwhile, and twice
    disk_store's and archive_ingest's; each batch as full as batch_bytes lets it be)."""
    heartbeat_interval: float = setting(1.0, gt=0)
    """Seconds between two heartbeats of a worker."""
    heartbeat_ttl: float = setting(10.0, gt=0)
    """Seconds without a heartbeat after which a worker counts as dead and its records are taken back."""
    sweep_interval: float = setting(5.0, gt=0)
    """Seconds between two sweeps for dead workers and due retries."""
    grace_period: float = setting(30.0, ge=0)
    """Seconds running actions get to finish on shutdown before they are cancelled (0: cancel at once)."""
    shutdown_redis_wait: float = setting(30.0, ge=0)
    """Seconds a stopping daemon, after the grace period, keeps retrying an unavailable Redis to write the outcomes
    of finished records and give the others back. Past it the daemon exits with status 1 and leaves them in its
    processing list, for another daemon's sweep once its heartbeat expires: none is lost, and records that finished
    meanwhile run again. ``dataq run`` and the systemd unit (``TimeoutStopSec=``) must give a daemon more time to stop
    than ``grace_period`` and this together."""
    max_crashes: int = setting(3, ge=0)
    """Times a record's worker may die while running it before the record goes inactive."""
    unreachable_after: int = setting(3, ge=1)
    """Transient failures in a row against one destination (connection refused, timed out) after which it is
    unreachable: records wait in the active list, and one at a time is sent as a probe."""
    probe_delay: float = setting(1.0, gt=0)
    """Seconds (at most) before the first probe of an unreachable destination; each failed probe doubles it."""
    probe_max_delay: float = setting(60.0, gt=0)
    """Longest wait between two probes."""

    def _check(self) -> None:
        heartbeat_rule(self)
        if self.probe_max_delay < self.probe_delay:
            raise Invalid("probe_max_delay", f"key '{{key}}' ({self.probe_max_delay}) must not be less than "
                          f"{{table}}.probe_delay ({self.probe_delay})")


@dataclass(frozen=True, slots=True)
class EventSettings(Section):
    """Trimming of each queue's event stream."""

    max_len: int = setting(100_000, ge=1)
    """Most event stream entries kept per queue: one per claim, done, failure... of a record, and one per push
    batch, however many records it queued."""
    max_age: float = setting(86400.0, gt=0)
    """Seconds an event is kept."""


@dataclass(frozen=True, slots=True)
class LogSettings(Section):
    """Where and how the daemons log."""

    dir: str | None = None
    """Log directory; None: ``/var/log/dataq`` when writable, else ``<data_dir>/log`` (see :meth:`resolved_dir`)."""
    level: str = setting("info", choices=LOG_LEVELS)
    """Least severe level written."""
    format: str = setting("auto", choices=LOG_FORMATS)
    """``json`` lines, ``console`` text, or ``auto``: console on a terminal, else json."""

    def _check(self) -> None:
        absolute(self.dir, "dir")

    def resolved_dir(self, data_dir: str, *, system_dir: str = SYSTEM_LOG_DIR) -> str:
        """``dir`` if set, else ``system_dir`` if writable (or creatable), else ``<data_dir>/log``."""
        if self.dir is not None:
            return self.dir
        if os.path.isdir(system_dir):
            writable = os.access(system_dir, os.W_OK | os.X_OK)
        else:
            parent = os.path.dirname(system_dir.rstrip("/"))
            writable = not os.path.lexists(system_dir) and os.access(parent, os.W_OK | os.X_OK)
        return system_dir if writable else os.path.join(data_dir, "log")


def default_data_dir(environ: Mapping[str, str] | None = None) -> str:
    """``$XDG_STATE_HOME/dataq`` if that variable holds an absolute path, else ``~/.local/state/dataq``."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME", "")
    if os.path.isabs(state):
        return os.path.join(state, "dataq")
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state", "dataq")


@dataclass(frozen=True, slots=True)
class Settings(Section):
    """Everything dataq is configured with; build it with :func:`load_settings`."""

    site: str = field(default_factory=socket.gethostname)
    """This site's name in a cascade: carried with hand-ons and receipts, shown wherever a journey is shown."""
    data_dir: str = field(default_factory=default_data_dir)
    """The embedded redis-server's data directory; logs go to ``<data_dir>/log`` if nowhere else is writable."""
    redis: RedisSettings = field(default_factory=RedisSettings)
    push: PushSettings = field(default_factory=PushSettings)
    pop: PopSettings = field(default_factory=PopSettings)
    events: EventSettings = field(default_factory=EventSettings)
    log: LogSettings = field(default_factory=LogSettings)
    mail: MailSettings = field(default_factory=MailSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    web: WebSettings = field(default_factory=WebSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    feed: FeedSettings = field(default_factory=FeedSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    queues: Mapping[str, QueueSettings] = field(
        default_factory=lambda: MappingProxyType({DEFAULT_QUEUE: QueueSettings(DEFAULT_QUEUE)}), hash=False
    )
    """Queue name -> its settings, in the file's order; the first is the default queue."""
    source: str | None = field(default=None, metadata={ROLE_KEY: FILLED})
    """The file these settings were loaded from (None: defaults and environment only)."""

    def _check(self) -> None:
        if SITE_PATTERN.fullmatch(self.site) is None:
            raise Invalid("site", f"key '{{key}}' must be 1 to 64 letters, digits, _, -, . or :, got {self.site!r}")
        absolute(self.data_dir, "data_dir")
        queues = MappingProxyType(dict(self.queues))
        object.__setattr__(self, "queues", queues)
        if not queues:
            raise Invalid("queues", "key '{key}' must define at least one queue")
        ports: dict[int, str] = {}
        for name, queue in queues.items():
            if queue.name != name:
                raise Invalid(f"queues.{name}", f"key '{{key}}' holds the settings of queue {queue.name!r}")
            other = ports.setdefault(port := self.push_port_for(name), name)
            if port != 0 and other != name:
                explicit = queue.push_port is not None and queues[other].push_port is not None
                raise Invalid(f"queues.{name}.push_port" if explicit else "push.port",
                               f"queues {other!r} and {name!r} would both listen on push port {port}; "
                               f"set a distinct push_port under [queues.{name}]")

        if self.feed.queue is not None and self.feed.queue not in queues:
            raise Invalid("feed.queue", f"key '{{key}}' names queue {self.feed.queue!r}, which is not configured; "
                          f"the queues are: {', '.join(queues)}")

    def queue(self, name: str | None = None) -> QueueSettings:
        """The settings of queue ``name``; None means the first configured queue."""
        if name is None:
            return next(iter(self.queues.values()))
        if name not in self.queues:
            where = f" in {self.source}" if self.source else ""
            raise ConfigError(f"unknown queue {name!r}; the queues configured{where} are: {', '.join(self.queues)}")
        return self.queues[name]

    def push_port_for(self, queue: str) -> int:
        """The port the push daemon of ``queue`` listens on: its ``push_port``, else ``push.port``."""
        port = self.queue(queue).push_port
        return self.push.port if port is None else port


def settings_file(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str], system_config: str = SYSTEM_CONFIG
) -> str | None:
    """The settings file to read: ``path`` (``--config``), else ``$DATAQ_CONFIG`` (set and empty: none), else
    ``system_config`` when it exists, else None (built-in defaults)."""
    if path is not None:
        return os.fspath(path)
    if CONFIG_ENV in environ:
        return environ[CONFIG_ENV] or None
    return system_config if os.path.exists(system_config) else None


def describe_source(settings: Settings) -> str:
    """Where ``settings`` came from, for a message that must say which settings it acted on."""
    if settings.source is not None:
        return f"settings file {settings.source}"
    return f"built-in settings (no --config, ${CONFIG_ENV} or {SYSTEM_CONFIG})"


def load_settings(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    options: Mapping[tuple[str, ...], tuple[str, object]] | None = None,
    *,
    system_config: str = SYSTEM_CONFIG,
) -> Settings:
    """Load the settings file (:func:`settings_file` picks it) and apply the environment overrides, then
    ``options``: the command line's, key path -> (option, value), e.g. ``{("push", "port"): ("--port", 9000)}``
    (a path, not a dotted key, as a queue's name may hold a dot).

    Each override is checked as the key it sets. Raises ConfigError naming the file, variable or option, the key
    and the problem.
    """
    env = os.environ if environ is None else environ
    source = settings_file(path, env, system_config)
    try:
        raw = {} if source is None else read_toml(source)
    except ConfigError as exc:
        if path is not None or CONFIG_ENV in env:
            raise
        # Found by default, not asked for: say how to do without it (a user who may not read the system's file).
        raise ConfigError(f"{exc} (read by default; name another with --config FILE, or none with "
                          f"{CONFIG_ENV}=)") from exc
    raw.setdefault("data_dir", default_data_dir(env))
    overrides: list[tuple[tuple[str, ...], object, str]] = [
        (tuple(key.split(".")), env[variable], f"environment variable {variable}")
        for variable, key in ENV_OVERRIDES.items() if variable in env
    ]
    overrides += [(key_path, value, f"option {option}") for key_path, (option, value) in (options or {}).items()]
    applied: dict[str, str] = {}
    for (*path_parts, name), value, origin in overrides:
        table = raw
        for part in path_parts:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                break  # the file has a non-table here; the loader reports it
        else:
            table[name] = value  # a variable's text: _convert parses it for a numeric key
            applied[".".join((*path_parts, name))] = origin
    return load_section(Settings, raw, "", Origins(source, applied), {"source": source})
