"""The Sentinel topology of :mod:`testbed.sentinel` as fixtures: a master, a replica, three sentinels; also
with TLS everywhere."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from dataq.config import RedisSettings, Settings
from dataq.store import QueueStore, redis_address
from testbed.sentinel import SentinelTopology, TlsFiles
from tests.push_support import QUEUE, Certs, push_settings


def started(topology: SentinelTopology) -> Iterator[SentinelTopology]:
    """``topology`` started (sentinels agreeing, replica linked), killed whole afterwards."""
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()


@pytest.fixture
def sentinel_topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelTopology]:
    yield from started(SentinelTopology(tmp_path_factory.mktemp("sentinel")))


SETTLED_DOWN_AFTER_MS = 3000
"""A down-after that a busy test machine does not reach by accident: with 1,000 ms (one ping period), a sentinel
now and then takes a just-promoted master for down and fails over a second time."""


@pytest.fixture
def two_replica_topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelTopology]:
    """The three data hosts of docs/ha.md: a master and two replicas, so that a new master has a replica at once;
    sentinels that fail over once per outage."""
    yield from started(SentinelTopology(tmp_path_factory.mktemp("sentinel-3"), replicas=2,
                                        down_after_ms=SETTLED_DOWN_AFTER_MS))


def topology_tls(certs: Certs) -> TlsFiles:
    """The test CA's certificates, as the servers and sentinels use them (the client certificate for their own
    links)."""
    return TlsFiles(certs.ca, certs.server_cert, certs.server_key, certs.client_cert, certs.client_key)


@pytest.fixture
def tls_sentinel_topology(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SentinelTopology]:
    """Servers and sentinels that answer clients with TLS only, and link to each other with TLS."""
    root: Path = tmp_path_factory.mktemp("sentinel-tls")
    yield from started(SentinelTopology(root, tls=topology_tls(certs)))


FAILOVER_TIMEOUT = 60.0


def ha_settings(topology: SentinelTopology, tmp_path: Path, *, min_replicas: int = 1, certs: Certs | None = None,
                **queue: object) -> Settings:
    """Test settings reaching Redis through ``topology``'s sentinels (with TLS and a client certificate of the
    test CA when ``certs`` is given)."""
    settings = push_settings("redis://unused", tmp_path / "data")
    tls = {} if certs is None else {"tls": True, "ca_file": certs.ca, "cert_file": certs.client_cert,
                                    "key_file": certs.client_key}
    redis = RedisSettings(sentinels=tuple(topology.sentinel_addresses), master_name=topology.master_name,
                          min_replicas=min_replicas, replica_timeout=1.0, socket_timeout=2.0, **tls)  # type: ignore[arg-type]
    queues = {name: dataclasses.replace(q, **queue) for name, q in settings.queues.items()}  # type: ignore[arg-type]
    return dataclasses.replace(settings, redis=redis, queues=queues)


def open_ha_store(settings: Settings) -> QueueStore:
    """A store of the test queue on the master that ``settings``' sentinels name."""
    address = redis_address(settings)
    assert address is not None
    return QueueStore.open(settings, address, QUEUE)


async def fail_over(topology: SentinelTopology) -> None:
    """Kill the master, wait for the sentinels to promote the replica, start the killed server again and wait
    until the master has a streaming replica."""
    old = topology.current_master_address()
    topology.kill_master()
    await asyncio.to_thread(topology.wait_for_failover, old, FAILOVER_TIMEOUT)
    await asyncio.to_thread(topology.restart_killed)


def write_ha_config(topology: SentinelTopology, tmp_path: Path, min_replicas: int = 1,
                    certs: Certs | None = None) -> Path:
    """A settings file for the CLI, reaching Redis through ``topology``'s sentinels (TLS with ``certs``)."""
    sentinels = ", ".join(f'"{address}"' for address in topology.sentinel_addresses)
    tls = "" if certs is None else (f'tls = true\nca_file = "{certs.ca}"\ncert_file = "{certs.client_cert}"\n'
                                    f'key_file = "{certs.client_key}"\n')
    path = tmp_path / "dataq.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        f'[redis]\nsentinels = [{sentinels}]\nmaster_name = "{topology.master_name}"\n'
        f"min_replicas = {min_replicas}\nsocket_timeout = 2.0\n{tls}"
        f'[log]\ndir = "{tmp_path / "log"}"\n[queues.{QUEUE}]\n'
    )
    return path


def the_cli_pushes_and_shows_the_master_its_replica_and_every_sentinel(
        run: Callable[..., Result], topology: SentinelTopology) -> None:
    """Through ``run`` (dataq-cli with settings reaching ``topology``): a record pushed, then ``--summary`` naming
    the master the sentinels name, an online replica, all three sentinels answering, and the record."""
    master = "{}:{}".format(*topology.current_master_address())
    pushed = run("--pushstr", "/data/a.fits 0123456789abcdef0123456789abcdef 10")
    assert pushed.exit_code == 0, pushed.output
    summary = run("--summary")
    assert summary.exit_code == 0, summary.output
    assert f"master:    {master}" in summary.output
    assert "online" in summary.output
    assert "sentinels: 3 of 3 answer" in summary.output
    assert "active:    1" in summary.output
