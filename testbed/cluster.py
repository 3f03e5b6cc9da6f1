"""A Redis Cluster on loopback for the scale-out tests and benchmarks: three masters, and replicas if asked.

Real processes, as in production: each node is an :class:`EmbeddedRedis` child (``appendfsync always``) with
``cluster-enabled yes``, and ``redis-cli --cluster create`` joins them and spreads the 16,384 slots over the
masters. A node also listens on its cluster-bus port (its port + 10,000), so both must be free. The short
``cluster-node-timeout`` (1 s) makes a SIGKILLed master's replica take over within a few seconds. Shared by
``tests/`` (fixtures in ``tests/cluster_support.py``) and ``bench/cluster.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis
from redis.cluster import key_slot

from dataq.embedded.redis_server import EmbeddedRedis, free_port
from dataq.keys import QueueKeys
from testbed.sentinel import LOOPBACK, MASTER_ARGS, loopback_client, port_of, wait_for_new_master

BUS_PORT_OFFSET = 10_000
NODE_TIMEOUT_MS = 1000
READY_TIMEOUT = 60.0
PORT_ATTEMPTS = 20
POLL = 0.05

SLOT_RANGES = ((0, 5460), (5461, 10922), (10923, 16383))
"""How ``redis-cli --cluster create`` spreads the slots over three masters."""

Address = tuple[str, int]

_names = itertools.count()


def queue_on_master(index: int, prefix: str = "q") -> str:
    """A queue name not handed out before by this process whose keys live on the ``index``-th master (0, 1 or 2)
    of a three-master cluster."""
    low, high = SLOT_RANGES[index]
    return next(name for name in (f"{prefix}{number}" for number in _names)
                if low <= key_slot(QueueKeys(name).records.encode()) <= high)


def free_cluster_port() -> int:
    """A loopback port that is free, and whose cluster-bus port (+10,000) is free too."""
    for _ in range(PORT_ATTEMPTS * 10):
        port = free_port()
        if port + BUS_PORT_OFFSET > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOOPBACK, port + BUS_PORT_OFFSET))
            except OSError:
                continue
        return port
    raise AssertionError("no free port pair (port, port + 10000) on loopback")


class ClusterTopology:
    """``masters`` masters, each with ``replicas`` replicas (roles change on fail-over)."""

    def __init__(self, root: Path, masters: int = 3, replicas: int = 0, appendfsync: str = "always") -> None:
        self._root = root
        self._masters = masters
        self._replicas = replicas
        self._appendfsync = appendfsync
        self.servers: list[EmbeddedRedis] = []
        self.killed: EmbeddedRedis | None = None

    @property
    def url(self) -> str:
        """The URL of the first node: what ``[redis] url`` names (any node would do)."""
        return self.servers[0].url

    def start(self) -> None:
        self.start_nodes()
        self.create()

    def start_nodes(self) -> None:
        """Start every node, in cluster mode but in no cluster yet (each knows only itself and no slot)."""
        for index in range(self._masters * (1 + self._replicas)):
            self._start_node(f"node-{index}")

    def create(self) -> None:
        """Join the started nodes into one cluster, slots spread over the masters, and wait until it is healthy."""
        executable = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        addresses = [f"{LOOPBACK}:{port_of(server)}" for server in self.servers]
        subprocess.run([executable, "--cluster", "create", *addresses, "--cluster-replicas", str(self._replicas),
                        "--cluster-yes"], check=True, capture_output=True, timeout=READY_TIMEOUT)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = READY_TIMEOUT) -> None:
        """Return once every live node says the cluster is ok, knows every node, and sees every replica linked."""
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster did not become healthy within {timeout} s")
            time.sleep(POLL)

    def master_of(self, key: str) -> Address:
        """The address of the master serving ``key``'s slot, as a live node's slot map says."""
        slot = key_slot(key.encode())
        for server in self._live():
            with loopback_client(port_of(server)) as node, contextlib.suppress(redis.RedisError):
                for start, end, master, *_replicas in node.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        return str(master[0]), int(master[1])
        raise AssertionError(f"no live node knows who serves slot {slot}")

    def masters(self) -> list[Address]:
        """The addresses of the masters that serve slots, ordered by their first slot."""
        with loopback_client(port_of(self._live()[0])) as node:
            ranges = sorted(node.execute_command("CLUSTER", "SLOTS"))
        return list(dict.fromkeys((str(master[0]), int(master[1])) for _start, _end, master, *_ in ranges))

    def server_at(self, address: Address) -> EmbeddedRedis:
        return next(server for server in self.servers if port_of(server) == address[1])

    def kill(self, address: Address) -> None:
        """SIGKILL the node at ``address``."""
        self.killed = self.server_at(address)
        self.killed.kill()

    def wait_for_failover(self, key: str, old: Address, timeout: float = READY_TIMEOUT) -> Address:
        """The new master of ``key``'s slot, once a replica has taken over from ``old`` and answers as master."""
        return wait_for_new_master(lambda: self.master_of(key), old, timeout)

    def fail_over_gracefully(self, key: str) -> Address:
        """``CLUSTER FAILOVER`` on the replica of ``key``'s master: the replica takes over once it has every write
        and the old master becomes its replica, both up (an operator's planned switch). Returns the new master."""
        old = self.master_of(key)
        with loopback_client(old[1]) as master:
            replicas = master.execute_command("CLUSTER", "REPLICAS", master.execute_command("CLUSTER", "MYID"))
        port = replicas[0].split()[1].split("@")[0].rpartition(":")[2]
        with loopback_client(int(port)) as replica:
            replica.execute_command("CLUSTER", "FAILOVER")
        return self.wait_for_failover(key, old)

    def restart_killed(self, timeout: float = READY_TIMEOUT) -> None:
        """Start the killed node again, as systemd would (it rejoins as a replica of the master that replaced
        it), and return once the cluster is healthy with every replica linked."""
        assert self.killed is not None, "kill() first"
        self.killed.start()
        self.killed = None
        self.wait_healthy(timeout)

    def stop(self) -> None:
        for server in self.servers:
            server.kill()

    def _start_node(self, name: str) -> None:
        directory = self._root / name
        for attempt in range(PORT_ATTEMPTS):
            port = free_cluster_port()
            server = EmbeddedRedis(directory, port=port, appendfsync=self._appendfsync, extra_args=(
                *MASTER_ARGS, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS)))
            try:
                server.start()
            except Exception:
                # Another process took the port (or its bus port) since it was found free.
                if attempt == PORT_ATTEMPTS - 1:
                    raise
                shutil.rmtree(directory, ignore_errors=True)
                continue
            self.servers.append(server)
            return

    def _live(self) -> list[EmbeddedRedis]:
        return [server for server in self.servers if server is not self.killed]

    def _healthy(self) -> bool:
        total = len(self.servers) if self.killed is None else len(self.servers) - 1
        for server in self._live():
            with loopback_client(port_of(server)) as node:
                try:
                    info = node.cluster("INFO")
                    replication = node.info("replication")
                except redis.RedisError:
                    return False
            if (info.get("cluster_state") != "ok" or int(info.get("cluster_known_nodes", 0)) < len(self.servers)
                    or int(info.get("cluster_slots_ok", 0)) != 16384):
                return False
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return False
            if replication.get("role") == "master" and int(replication.get("connected_slaves", 0)) < (
                    self._replicas if total == len(self.servers) and _serves_slots(node) else 0):
                return False
        return True


def _serves_slots(node: redis.Redis) -> bool:
    myself = next(line for line in node.execute_command("CLUSTER", "NODES").splitlines() if "myself" in line)
    return len(myself.split()) > 8

