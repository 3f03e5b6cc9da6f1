"""Redis topologies on loopback for the high-availability tests and benchmarks: a master with a replica, and a
Sentinel set-up (a master, one replica, three sentinels).

Real processes, as in production (Debian's redis-server, also in sentinel mode): the sentinels agree on the
master with a quorum of 2 and declare it down after 1 s without an answer, so a SIGKILLed master is replaced
within seconds. The servers are :class:`EmbeddedRedis` children; the sentinels are started here because a
sentinel needs a writable configuration file of its own (it records what it learns there). Shared by ``tests/``
(fixtures in ``tests/replica_support.py`` and ``tests/sentinel_support.py``) and ``bench/ha.py``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import redis

from dataq.embedded.redis_server import EmbeddedRedis, free_port

LOOPBACK = "127.0.0.1"
LINK_TIMEOUT = 20.0
MASTER_ARGS = ("--repl-diskless-sync-delay", "0", "--shutdown-timeout", "0")
"""A replica syncs at once, not after the 5 s Redis waits by default for more replicas to share one transfer; a
master stops at once, without waiting for lagging replicas."""


def port_of(server: EmbeddedRedis) -> int:
    port = urlparse(server.url).port
    assert port is not None
    return port


def wait_linked(replica: EmbeddedRedis, timeout: float = LINK_TIMEOUT) -> None:
    """Return once ``replica`` has synced with its master, streams from it, and has written its first AOF (until
    then it refuses to shut down, and a fork is running beside it)."""
    client = redis.Redis.from_url(replica.url, socket_timeout=2)
    deadline = time.monotonic() + timeout
    try:
        while (client.info("replication").get("master_link_status") != "up"
               or client.info("persistence").get("aof_rewrite_in_progress")
               or client.info("persistence").get("aof_rewrite_scheduled")):
            if time.monotonic() > deadline:
                raise AssertionError(f"replica {replica.url} did not link to its master in {timeout} s")
            time.sleep(0.05)
    finally:
        client.close()


def wait_caught_up(master: EmbeddedRedis, timeout: float = LINK_TIMEOUT) -> None:
    """Return once the master streams to its replica (with diskless sync, only after the replica's first
    acknowledgement) and the replica has acknowledged everything the master has written."""
    client = redis.Redis.from_url(master.url, decode_responses=True, socket_timeout=5)
    deadline = time.monotonic() + timeout
    try:
        while True:
            info = client.info("replication")
            replica = info.get("slave0")
            if (isinstance(replica, dict) and replica["state"] == "online"
                    and int(replica["offset"]) >= int(info["master_repl_offset"])):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the replica did not catch up in {timeout} s: {info}")
            time.sleep(0.05)
    finally:
        client.close()


def start_replica_pair(root: Path, replica_appendfsync: str = "always") -> tuple[EmbeddedRedis, EmbeddedRedis]:
    """A started master (``appendfsync always``) and a replica streaming from it (caught up); the caller stops
    both."""
    master = EmbeddedRedis(root / "master", port=0, appendfsync="always", extra_args=MASTER_ARGS)
    master.start()
    replica = EmbeddedRedis(root / "replica", port=0, appendfsync=replica_appendfsync,
                            extra_args=["--replicaof", LOOPBACK, str(port_of(master))])
    try:
        replica.start()
        wait_linked(replica)
        wait_caught_up(master)
    except BaseException:
        replica.stop()
        master.stop()
        raise
    return master, replica


MASTER_NAME = "dataq"
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
READY_TIMEOUT = 30.0
POLL = 0.05

Address = tuple[str, int]


class SentinelTopology:
    """A master and ``replicas`` replicas (roles change on fail-over), and three sentinels."""

    master_name = MASTER_NAME

    def __init__(self, root: Path, replicas: int = 1) -> None:
        self._root = root
        self._replicas = replicas
        self._killed: EmbeddedRedis | None = None
        self.servers: list[EmbeddedRedis] = []
        self.sentinel_ports: list[int] = []
        self._sentinels: list[subprocess.Popen[bytes] | None] = []

    @property
    def sentinel_addresses(self) -> list[str]:
        return [f"{LOOPBACK}:{port}" for port in self.sentinel_ports]

    def start(self) -> None:
        master = self._server("master", MASTER_ARGS)
        for index in range(self._replicas):
            self._server(f"replica-{index}", (*MASTER_ARGS, "--replicaof", LOOPBACK, str(port_of(master))))
        for replica in self.servers[1:]:
            wait_linked(replica)
        for index in range(3):
            self._start_sentinel(index, port_of(master))
        deadline = time.monotonic() + READY_TIMEOUT
        while not self._sentinels_agree(port_of(master)):
            if time.monotonic() > deadline:
                raise AssertionError("the sentinels did not find each other and the replica in time")
            time.sleep(POLL)

    def current_master_address(self) -> Address:
        """The master as a live sentinel names it."""
        for port in self._live_sentinel_ports():
            with loopback_client(port) as sentinel, contextlib.suppress(redis.RedisError):
                host, master_port = sentinel.sentinel_get_master_addr_by_name(MASTER_NAME)
                return host, int(master_port)
        raise AssertionError("no sentinel answers")

    def server_at(self, address: Address) -> EmbeddedRedis:
        return next(server for server in self.servers if port_of(server) == address[1])

    def kill_master(self) -> Address:
        """SIGKILL the current master; returns its address."""
        address = self.current_master_address()
        self.server_at(address).kill()
        self._killed = self.server_at(address)
        return address

    def wait_for_failover(self, old: Address, timeout: float = READY_TIMEOUT * 2) -> Address:
        """The new master's address, once the sentinels name another server and it answers as master."""
        return wait_for_new_master(self.current_master_address, old, timeout)

    def restart_killed(self, timeout: float = READY_TIMEOUT * 2) -> Address:
        """Start the killed master again, as systemd would, and return the master's address once it has every
        data server as a streaming replica.

        Usually the sentinels make the restarted server a replica of the new master. With a down-after as short
        as one ping period, a sentinel may also take the just-promoted master for down and fail over again, to
        the restarted server (whose data is older): then the new master is the replica, resynced from scratch.
        Writes acknowledged with ``min_replicas`` survive both, which is what the tests check.
        """
        assert self._killed is not None, "kill_master() first"
        self._killed.start()
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(AssertionError, redis.RedisError):
                address = self.current_master_address()
                with loopback_client(address[1]) as master:
                    info = master.info("replication")
                    online = [value for key, value in info.items()
                              if key.startswith("slave") and isinstance(value, dict) and value["state"] == "online"]
                    if info.get("role") == "master" and len(online) >= self._replicas:
                        return address
            if time.monotonic() > deadline:
                raise AssertionError(f"replication not restored within {timeout} s of the restart")
            time.sleep(POLL)

    def kill_sentinel(self, index: int) -> None:
        process = self._sentinels[index]
        if process is not None:
            process.kill()
            process.wait()
            self._sentinels[index] = None

    def stop(self) -> None:
        for index in range(len(self._sentinels)):
            self.kill_sentinel(index)
        for server in self.servers:
            server.kill()

    def _server(self, name: str, args: tuple[str, ...]) -> EmbeddedRedis:
        server = EmbeddedRedis(self._root / name, port=0, appendfsync="always", extra_args=args)
        self.servers.append(server)
        server.start()
        return server

    def _start_sentinel(self, index: int, master_port: int) -> None:
        directory = self._root / f"sentinel-{index}"
        directory.mkdir()
        port = free_port()
        config = directory / "sentinel.conf"
        config.write_text(
            f"port {port}\nbind {LOOPBACK}\ndir {directory}\nlogfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {MASTER_NAME} {LOOPBACK} {master_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        executable = shutil.which("redis-server") or "/usr/bin/redis-server"
        process = subprocess.Popen([executable, str(config), "--sentinel"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._sentinels.append(process)
        self.sentinel_ports.append(port)

    def _live_sentinel_ports(self) -> list[int]:
        return [port for port, process in zip(self.sentinel_ports, self._sentinels, strict=True) if process]

    def _sentinels_agree(self, master_port: int) -> bool:
        """Every sentinel names the master, knows the two other sentinels and every replica."""
        for port in self._live_sentinel_ports():
            with loopback_client(port) as sentinel:
                try:
                    master = sentinel.sentinel_get_master_addr_by_name(MASTER_NAME)
                    others = sentinel.sentinel_sentinels(MASTER_NAME)
                    replicas = sentinel.sentinel_slaves(MASTER_NAME)
                except redis.RedisError:
                    return False
                if master is None or int(master[1]) != master_port or len(others) < 2 or len(replicas) < self._replicas:
                    return False
        return True


def wait_for_new_master(named: Callable[[], Address], old: Address, timeout: float) -> Address:
    """The address ``named`` gives once it is not ``old`` and the server there answers as a master (``named``
    may raise AssertionError or a Redis error while nobody can tell)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(AssertionError, redis.RedisError):
            address = named()
            if address != old:
                with loopback_client(address[1]) as server:
                    if server.role()[0] == "master":
                        return address
        if time.monotonic() > deadline:
            raise AssertionError(f"no fail-over from {old} within {timeout} s")
        time.sleep(POLL)


@contextlib.contextmanager
def loopback_client(port: int) -> Iterator[redis.Redis]:
    """A client of the server (or sentinel) at 127.0.0.1:``port`` that gives up after 2 s, closed after the block."""
    client = redis.Redis(host=LOOPBACK, port=port, decode_responses=True, socket_timeout=2, socket_connect_timeout=2)
    try:
        yield client
    finally:
        client.close()
