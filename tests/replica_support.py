"""A master with one replica (plain replication, no Sentinel), and a way to hold the replica back.

A replica stopped with SIGSTOP keeps its connection to the master but acknowledges nothing, which is how a
replica that falls behind looks to ``WAIT``; SIGCONT lets it catch up.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from dataq.embedded.redis_server import EmbeddedRedis
from testbed.sentinel import MASTER_ARGS, port_of, wait_caught_up, wait_linked
from tests.conftest import MakeRedis


@dataclass
class ReplicaPair:
    master: EmbeddedRedis
    replica: EmbeddedRedis

    @contextlib.contextmanager
    def replica_held(self) -> Iterator[None]:
        """The replica frozen (SIGSTOP) while the block runs; after it, caught up again."""
        pid = self.replica.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_caught_up(self.master)

    def replica_client(self) -> redis.Redis:
        return redis.Redis.from_url(self.replica.url, decode_responses=True, socket_timeout=5)


@pytest.fixture
def replica_pair(make_redis: MakeRedis) -> ReplicaPair:
    master = make_redis(extra_args=MASTER_ARGS)
    replica = make_redis(extra_args=["--replicaof", "127.0.0.1", str(port_of(master))])
    wait_linked(replica)
    wait_caught_up(master)
    return ReplicaPair(master, replica)
