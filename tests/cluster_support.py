"""Redis Cluster fixtures (:mod:`testbed.cluster`): three masters on loopback, with a replica each when a
test kills one, and queue names that land on the master a test wants."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dataq.config import MetricsSettings, QueueSettings, RedisSettings, Settings
from testbed.cluster import SLOT_RANGES, ClusterTopology, queue_on_master
from tests.push_support import push_settings


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTopology]:
    """Three masters, no replicas; shared by a module's tests (each uses queues of its own)."""
    topology = ClusterTopology(tmp_path_factory.mktemp("cluster"))
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()


@pytest.fixture
def replicated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTopology]:
    """Three masters with a replica each, for a test that kills a master."""
    topology = ClusterTopology(tmp_path_factory.mktemp("cluster"), replicas=1)
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()


def queues_on_each_master(prefix: str = "q") -> list[str]:
    return [queue_on_master(index, prefix) for index in range(len(SLOT_RANGES))]


def cluster_settings(url: str, data_dir: Path, queues: list[str], *, min_replicas: int = 0,
                     **queue: Any) -> Settings:
    """Settings of ``queues`` on the cluster of the node at ``url``, with the push and pop daemons' fast
    heartbeats of the other tests."""
    settings = push_settings(url, data_dir)
    redis = RedisSettings(url=url, cluster=True, min_replicas=min_replicas, replica_timeout=1.0,
                          socket_timeout=2.0)
    return dataclasses.replace(settings, redis=redis, metrics=MetricsSettings(enabled=False),
                               queues={name: QueueSettings(name, **queue) for name in queues})
