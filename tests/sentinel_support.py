"""The Sentinel topology of :mod:`bench.ha_topology` as a fixture: a master, a replica, three sentinels."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.ha_topology import SentinelTopology


@pytest.fixture
def sentinel_topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelTopology]:
    """A started topology (sentinels agreeing, replica linked), killed whole at teardown."""
    topology = SentinelTopology(tmp_path_factory.mktemp("sentinel"))
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()
