"""A cascade of sites on loopback, each a host of its own: a redis-server, an ``rsync --daemon`` taking files into
its ``incoming`` directory, ``dataq push`` and ``dataq pop``. Every site but the last runs ``network_move`` to the
next site's rsync daemon and hands records on to its push daemon; the last runs ``disk_store`` into its
``store`` directory (the archive).

Used by ``tests/e2e/test_cascade.py`` and ``bench/cascade.py``. A site can lose its pop daemon (SIGKILL), its
push daemon, or everything (:meth:`Site.destroy`: every process killed, its Redis data and files gone, started
again empty: a host replaced).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dataq.embedded.redis_server import EmbeddedRedis
from dataq.store import QueueStore
from testbed.chaos import Daemon
from testbed.link import reached
from testbed.ports import unclaimed_port
from testbed.rsync import LOOPBACK, RsyncDaemon
from testbed.settings_file import write_tables

QUEUE = "transfer"
MODULE = "incoming"


class Site:
    """One site of a :class:`Cascade`: its directories, its Redis, its rsync daemon and its two daemons (of another
    dataq with ``python``, an older one's interpreter: :mod:`testbed.older`)."""

    def __init__(self, root: Path, name: str, python: Path | None = None) -> None:
        self.root, self.name, self.python = root / name, name, python
        self.incoming = self.root / MODULE
        self.archive = self.root / "store"
        self.redis = EmbeddedRedis(self.root / "redis", port=0, appendfsync="always")
        self.rsync = RsyncDaemon(self.root / "rsyncd", {MODULE: self.incoming})
        self.port = unclaimed_port()  # known to the site before, and bound only when its push daemon starts
        self.config = self.root / "dataq.toml"
        self.push = Daemon("push", self.config, python)
        self.pop = Daemon("pop", self.config, python)

    def start_services(self) -> None:
        """Redis and rsync (the site's host up); the daemons are started apart."""
        self.incoming.mkdir(parents=True, exist_ok=True)
        self.archive.mkdir(parents=True, exist_ok=True)
        self.redis.start()
        self.rsync.start(self.rsync.port or None)

    def write_config(self, actions: Sequence[str], options: Mapping[str, Mapping[str, Any]],
                     pop: Mapping[str, Any], queue: Mapping[str, Any]) -> None:
        tables: dict[str, Mapping[str, Any]] = {
            "redis": {"url": self.redis.url, "socket_timeout": 5.0},
            "log": {"dir": str(self.root / "log"), "format": "json"},
            "metrics": {"enabled": False},
            "push": {"host": LOOPBACK},
            "pop": {"heartbeat_interval": 0.3, "heartbeat_ttl": 2.0, "sweep_interval": 0.3, "grace_period": 5.0,
                    "probe_delay": 0.2, "probe_max_delay": 1.0, **pop},
            f"queues.{QUEUE}": {"push_port": self.port, "actions": list(actions), **queue},
        }
        tables.update({f"queues.{QUEUE}.{action}": values for action, values in options.items()})
        # An older dataq knows no site names (and refuses keys it does not know).
        write_tables(self.config, self.root / "data", tables, **({"site": self.name} if self.python is None else {}))

    def start_daemons(self) -> None:
        self.push.start()
        self.pop.start()

    def store(self) -> QueueStore:
        return QueueStore.from_url(self.redis.url, QUEUE)

    def destroy(self) -> None:
        """The host lost: every process killed, its Redis data and received files gone; then up again, empty,
        on the same ports (its replacement)."""
        for daemon in (self.pop, self.push):
            daemon.kill()
        port = self.rsync.port
        url = self.redis.url
        self.redis.stop()
        self.rsync.stop()
        for directory in (self.incoming, self.archive, self.root / "redis"):
            shutil.rmtree(directory, ignore_errors=True)
        redis_port = int(url.rsplit(":", 1)[1])
        self.redis = EmbeddedRedis(self.root / "redis", port=redis_port, appendfsync="always")
        self.incoming.mkdir(parents=True)
        self.archive.mkdir(parents=True)
        self.redis.start()
        self.rsync.start(port)

    def down(self) -> None:
        """The site unreachable: its daemons and its rsync daemon killed (its Redis and files stay)."""
        for daemon in (self.pop, self.push):
            daemon.kill()
        self.rsync.stop()

    def up(self) -> None:
        """Back after :meth:`down`, on the same ports."""
        self.rsync.start(self.rsync.port)
        self.start_daemons()

    def stop(self) -> None:
        for daemon in (self.pop, self.push):
            daemon.stop()
        self.rsync.stop()
        self.redis.stop()


class Cascade:
    """``names[0]`` → ``names[1]`` → ... → ``names[-1]``; ``move`` are extra options of every ``network_move``,
    ``queue`` extra settings of every site's queue, ``queues`` of one site's (by its name); ``older`` runs a site
    (by its name) on an older dataq's interpreter, whose ``network_move`` hands on without custody; ``link`` (one-way
    delay in seconds, megabits per second or None) puts a long link (:mod:`testbed.link`) on every hop, for both
    the rsync transfers and the push daemon's connections (hand-ons, receipts)."""

    def __init__(self, root: Path, names: Sequence[str], *, move: Mapping[str, Any] | None = None,
                 pop: Mapping[str, Any] | None = None, queue: Mapping[str, Any] | None = None,
                 queues: Mapping[str, Mapping[str, Any]] | None = None,
                 older: Mapping[str, Path] | None = None, link: tuple[float, float | None] | None = None) -> None:
        self.sites = [Site(root, name, (older or {}).get(name)) for name in names]
        self.link = link
        self._links = contextlib.ExitStack()
        self.move, self.pop, self.queue = dict(move or {}), dict(pop or {}), dict(queue or {})
        self.queues = {name: {**self.queue, **(queues or {}).get(name, {})} for name in names}

    @property
    def first(self) -> Site:
        return self.sites[0]

    @property
    def last(self) -> Site:
        return self.sites[-1]

    def start(self) -> None:
        for site in self.sites:
            site.start_services()
        for site, following in zip(self.sites, [*self.sites[1:], None], strict=True):
            if following is None:
                site.write_config(["disk_store"], {"disk_store": {"root": str(site.archive)}}, self.pop,
                                  self.queues[site.name])
                continue
            rsync_port, push_port = self._reach(following.rsync.port), self._reach(following.port)
            move: dict[str, Any] = {
                "destination": f"rsync://{LOOPBACK}:{rsync_port}/{MODULE}", "next_sites": [f"{LOOPBACK}:{push_port}"],
                "next_path": f"{following.incoming}/{{relpath}}"}
            if site.python is None:
                move |= {"remove_source": "after_receipt", **self.move}
            elif "handon_timeout" in self.move:
                move["handon_timeout"] = self.move["handon_timeout"]
            site.write_config(["network_move"], {"network_move": move}, self.pop, self.queues[site.name])
        for site in reversed(self.sites):
            site.start_daemons()

    def _reach(self, port: int) -> int:
        """The port another site reaches ``port`` at: through a long link when the cascade has one."""
        return reached(port, self.link, self._links)

    def stop(self) -> None:
        for site in self.sites:
            site.stop()
        self._links.close()
