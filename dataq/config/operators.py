"""The sections of the settings an operator's tools read: e-mail notices (``[mail]``), the Prometheus
endpoint (``[metrics]``), the web console (``[web]``) and the thresholds of a queue's conditions (``[health]``).
:mod:`dataq.config.schema` gathers them into :class:`~dataq.config.schema.Settings`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from dataq.addresses import MAX_PORT, parse_host_port
from dataq.config.loader import Invalid, Section, setting

MAIL_SECURITY_CHOICES = ("none", "starttls", "tls")


@dataclass(frozen=True, slots=True)
class MailSettings(Section):
    """E-mail notices to operators (:mod:`dataq.ops.mail`): where to send them and how often."""

    enabled: bool = False
    """Send notices by mail (they are logged either way)."""
    host: str = "127.0.0.1"
    """SMTP server (a local relay by default)."""
    port: int = setting(25, ge=1, le=MAX_PORT)
    """SMTP port: 25 or 587 (``starttls``), 465 (``tls``)."""
    security: str = setting("none", choices=MAIL_SECURITY_CHOICES)
    """``none`` (plain SMTP), ``starttls`` (upgrade after connecting) or ``tls`` (TLS from the first byte)."""
    username: str | None = None
    """Log in as this user (needs ``password_file`` or ``password_env``); None: no login."""
    password_file: str | None = None
    """File holding the password: an absolute path, or a credential name in ``$CREDENTIALS_DIRECTORY``."""
    password_env: str | None = None
    """Name of the environment variable holding the password (never the password itself)."""
    sender: str = "dataq@localhost"
    """The ``From`` address."""
    recipients: tuple[str, ...] = ()
    """The ``To`` addresses; required when ``enabled``."""
    interval: float = setting(900.0, gt=0)
    """Seconds between two mails of one kind; notices meanwhile are folded into one digest."""
    examples: int = setting(5, ge=1)
    """Notices quoted in full in a digest (and sample errors in a systemic-failure notice)."""
    systemic_failures: int = setting(100, ge=1)
    """More action failures than this within ``systemic_window`` is a systemic failure."""
    systemic_window: float = setting(600.0, gt=0)
    """Seconds over which failures are counted for ``systemic_failures``."""
    redis_down_after: float = setting(60.0, ge=0)
    """Seconds Redis must stay unreachable before a notice is sent."""
    timeout: float = setting(10.0, gt=0)
    """Seconds one SMTP conversation may take."""

    def _check(self) -> None:
        if not self.host:
            raise Invalid("host", "key '{key}' must not be empty")
        if self.enabled and not self.recipients:
            raise Invalid("recipients", "key '{key}' must name at least one address when {table}.enabled is true")
        for address in (self.sender, *self.recipients):
            if "@" not in address:
                raise Invalid("recipients" if address in self.recipients else "sender",
                               f"key '{{key}}' holds {address!r}, which is not a mail address")
        object.__setattr__(self, "recipients", tuple(self.recipients))
        if self.password_file is not None and self.password_env is not None:
            raise Invalid("password_file", "keys '{key}' and '{table}.password_env' exclude each other")
        has_password = self.password_file is not None or self.password_env is not None
        if self.username is not None and not has_password:
            raise Invalid("username", "key '{key}' needs '{table}.password_file' or '{table}.password_env'")
        if has_password and self.username is None:
            key = "password_file" if self.password_file is not None else "password_env"
            raise Invalid(key, "key '{key}' needs '{table}.username'")


@dataclass(frozen=True, slots=True)
class MetricsSettings(Section):
    """The Prometheus endpoint each daemon serves (:mod:`dataq.ops.metrics`)."""

    enabled: bool = True
    """Serve ``GET /metrics``."""
    host: str = "127.0.0.1"
    """Address to listen on (loopback: only local scrapers or a proxy reach it)."""
    push_port: int = setting(9108, ge=0, le=MAX_PORT)
    """Port of the push daemon's endpoint (0: an ephemeral port)."""
    pop_port: int = setting(9109, ge=0, le=MAX_PORT)
    """Port of the pop daemon's endpoint (0: an ephemeral port)."""

    def _check(self) -> None:
        if not self.host:
            raise Invalid("host", "key '{key}' must not be empty (use 0.0.0.0 or :: for every interface)")

    def port_for(self, role: str) -> int:
        """The port of the daemon ``role`` (``push`` or ``pop``)."""
        return self.push_port if role == "push" else self.pop_port


WEB_TOKEN_MIN_LENGTH = 16
"""The shortest operator token: it guards actions that move every record of a queue."""


@dataclass(frozen=True, slots=True)
class WebSettings(Section):
    """The operator's web console, ``dataq web`` (:mod:`dataq.web`)."""

    enabled: bool = True
    """Whether ``dataq run`` starts the console (``dataq web`` always serves it)."""
    host: str = "127.0.0.1"
    """Address to listen on (loopback: only this host, or a proxy, reaches it)."""
    port: int = setting(9180, ge=0, le=MAX_PORT)
    """Port of the console (0: an ephemeral port, logged)."""
    token: str = ""
    """The operator token: with it, the console's actions are allowed; empty, the console is read-only."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names the console answers to besides its own (a request naming another in its ``Host`` header is
    refused, against DNS rebinding): ``localhost``, any IP address and ``host`` always; the machine's names too
    when ``host`` is not loopback. ``.example.org`` is that domain and its subdomains, ``*`` any host. Any port."""

    feeders: tuple[str, ...] = ()
    """Metrics endpoints (``host:port``) of feeders on other hosts whose spools and links the console shows beside
    this site's own ``[feed] directories`` (``dataq feed``'s ``metrics_port`` there)."""

    def _check(self) -> None:
        if not self.host:
            raise Invalid("host", "key '{key}' must not be empty (use 0.0.0.0 or :: for every interface)")
        for entry in self.feeders:
            try:
                _, port = parse_host_port(entry, 0)
            except ValueError as exc:
                raise Invalid("feeders", f"key '{{key}}' holds {exc}") from None
            if not port:
                raise Invalid("feeders", f"key '{{key}}' holds {entry!r} without a port: a feeder's metrics "
                              "endpoint is host:port")
        object.__setattr__(self, "feeders", tuple(self.feeders))
        if self.token and (len(self.token) < WEB_TOKEN_MIN_LENGTH or any(c.isspace() for c in self.token)):
            raise Invalid("token", f"key '{{key}}' must be at least {WEB_TOKEN_MIN_LENGTH} characters without "
                          "spaces (or empty for a read-only console)")
        object.__setattr__(self, "allowed_hosts", tuple(_allowed_host(entry) for entry in self.allowed_hosts))


ANY_HOST = "*"
"""The ``allowed_hosts`` entry that lets the console answer to any host."""
_HOST_NAME = re.compile(r"\.?[a-z0-9_-]+(\.[a-z0-9_-]+)*")


def _allowed_host(entry: str) -> str:
    """An ``allowed_hosts`` entry as the console compares it: lower case, without a final dot or IPv6 brackets."""
    def refuse(why: str) -> Invalid:
        return Invalid("allowed_hosts", f"key '{{key}}' holds {entry!r}, {why}")

    if not entry or any(c.isspace() for c in entry):
        raise refuse("but a host is a name or an address without spaces")
    if "://" in entry:
        authority = entry.split("://", 1)[1].split("/", 1)[0]
        raise refuse(f"but a host has no scheme: write {re.sub(r':[0-9]*$', '', authority)!r}")
    if "/" in entry:
        raise refuse(f"but a host has no path: write {entry.split('/', 1)[0]!r}")
    if entry == ANY_HOST:
        return entry
    if "*" in entry:
        raise refuse("but '*' stands alone (any host); '.example.org' is a domain and its subdomains")
    host = entry.lower().removesuffix(".")
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        return str(ipaddress.ip_address(host[1:-1] if bracketed else host))
    except ValueError:
        pass
    if "]:" in host or (":" in host and not host.startswith("[")):
        raise refuse("but a host is named without a port: the console accepts any port")
    if not _HOST_NAME.fullmatch(host):
        raise refuse("which is not a host name (letters, digits, '-', '.'; a name beyond ASCII in its xn-- form)")
    return host


@dataclass(frozen=True, slots=True)
class HealthSettings(Section):
    """When the web console calls a queue unwell (:mod:`dataq.ops.conditions`). Each default is the threshold of
    the alert rule of the same condition in ``config/prometheus/dataq-rules.yml`` (a test pins them together):
    change a rule's number and the key here together, so that the page and Prometheus never disagree."""

    backlog_old: float = setting(3600.0, gt=0)
    """Seconds the oldest active record may wait before the backlog is old (alert ``DataqBacklogOld``)."""
    growing_per_hour: float = setting(100.0, ge=0)
    """Records an hour the active list must grow by (over the last hour) to be growing
    (``DataqQueueGrowing``)."""
    growing_above: int = setting(1000, ge=0)
    """Active records below which a growing list is not called growing (``DataqQueueGrowing``)."""
    stalled_after: float = setting(900.0, gt=0, le=3600)
    """Seconds without a record done, while records have waited that long and the queue runs, after which the
    queue is stalled (``DataqQueueStalled``); at most an hour, what the rates ring keeps."""
    receipts_overdue: float = setting(21600.0, gt=0)
    """Seconds a record handed on may wait for its receipt before receipts are overdue
    (``DataqReceiptsOverdue``)."""
