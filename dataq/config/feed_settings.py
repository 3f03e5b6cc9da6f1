"""The ``[feed]`` section: store-and-forward feeders (``dataq feed``, ``dataq-feed@.service``).

``directories`` are watched by ``dataq run`` and, under systemd, by one ``dataq-feed@DIR.service`` each (the
generator makes ``dataq.target`` want them); ``dataq feed --watch DIR`` takes the other keys from here too, its
options winning. :mod:`dataq.config.schema` gathers it into :class:`~dataq.config.schema.Settings`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dataq.addresses import MAX_PORT, parse_host_port
from dataq.config.loader import Invalid, Section, absolute, setting, together

DEFAULT_FEED_WINDOW = 1000
DEFAULT_FEED_METRICS_PORT = 9110


@dataclass(frozen=True, slots=True)
class FeedSettings(Section):
    """Watched directories and how their files are fed (:mod:`dataq.feed`)."""

    directories: tuple[str, ...] = ()
    """Absolute paths of directories whose complete files are fed, one feeder each."""
    queue: str | None = None
    """The queue whose push daemon the feeders send to when no ``targets`` are given (None: the first queue)."""
    targets: tuple[str, ...] = ()
    """``host:port`` push daemons, tried in order (none: the queue's own push daemon)."""
    spool: str | None = None
    """Directory holding one spool per watched directory (None: ``<data_dir>/feed``)."""
    recursive: bool = False
    """Watch the directories' subdirectories too."""
    include: tuple[str, ...] = ()
    """Globs a file must match to be fed (none: every file); a glob with ``/`` matches the path beneath the
    directory, others the name."""
    exclude: tuple[str, ...] = ()
    """Globs of files not fed, besides hidden and temporary names (``.*``, ``*.tmp``, ``*.part``, ``*~``)."""
    poll: float | None = setting(None, gt=0)
    """Seconds between listings of a directory on a network file system, where inotify sees no writes (None:
    inotify)."""
    settle: float = setting(2.0, ge=0)
    """Seconds a file found by a scan must stay unchanged before it is fed."""
    window: int = setting(DEFAULT_FEED_WINDOW, ge=1)
    """Records sent and not yet answered."""
    timeout: float = setting(10.0, gt=0)
    """Seconds a push daemon has to accept a connection (and, with several targets, to answer) before the next
    is tried."""
    failback_after: float = setting(60.0, gt=0)
    """Seconds on a later target before the first is tried again."""
    tls_ca: str | None = None
    """CA file to verify TLS push daemons with (set it, or ``tls_cert``, to feed over TLS)."""
    tls_cert: str | None = None
    """Client certificate for mutual TLS."""
    tls_key: str | None = None
    """Key of ``tls_cert``."""
    metrics_port: int = setting(DEFAULT_FEED_METRICS_PORT, ge=0, le=MAX_PORT)
    """Port of the metrics endpoint of the first directory's feeder; the feeder of the n-th directory of
    ``directories`` serves on ``metrics_port + n - 1``, and one of a directory not listed (``dataq feed --watch``
    by hand) on the port after the listed ones' (a port taken is logged, and an ephemeral one served instead; 0:
    always ephemeral). Served on ``[metrics] host`` when ``[metrics] enabled``."""

    def _check(self) -> None:
        object.__setattr__(self, "directories", tuple(os.path.normpath(d) for d in self.directories))
        for directory in self.directories:
            absolute(directory, "directories")
        if len(set(self.directories)) != len(self.directories):
            raise Invalid("directories", "key '{key}' names a directory twice")
        for target in self.targets:
            try:
                parse_target(target)
            except ValueError as exc:
                raise Invalid("targets", f"key '{{key}}': {exc}") from None
        absolute(self.spool, "spool")
        together(self, "tls_cert", "tls_key")
        if self.metrics_port and self.metrics_port + len(self.directories) > MAX_PORT:
            raise Invalid("metrics_port", f"key '{{key}}' ({self.metrics_port}) leaves no port up to {MAX_PORT} for "
                          f"each of the {len(self.directories)} directories' feeders and one watched by hand")

    def metrics_port_for(self, directory: str) -> int:
        """The metrics port of the feeder watching ``directory``: one port per configured directory, in order; a
        directory not listed takes the next, so it never takes a listed feeder's port (and its alerts with it)."""
        if not self.metrics_port:
            return 0
        normal = os.path.normpath(os.path.abspath(directory))
        index = self.directories.index(normal) if normal in self.directories else len(self.directories)
        return self.metrics_port + index


def parse_target(text: str) -> tuple[str, int]:
    """(host, port) of a push daemon given as ``host:port`` (``[v6-address]:port``); ValueError says what is
    wrong (a feeder, ``[feed] targets``, and ``network_move``'s ``next_sites``)."""
    host, port = parse_host_port(text, default_port=0)
    if port == 0:
        raise ValueError(f"{text!r} has no port (host:port)")
    return host, port
