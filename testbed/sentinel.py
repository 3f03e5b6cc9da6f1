"""Redis topologies on loopback for the high-availability tests and benchmarks: a master with a replica, and a
Sentinel set-up (a master, one replica, three sentinels), also with TLS.

Real processes, as in production (Debian's redis-server, also in sentinel mode): the sentinels agree on the
master with a quorum of 2 and declare it down after 1 s without an answer, so a SIGKILLed master is replaced
within seconds. The servers are :class:`EmbeddedRedis` children; the sentinels are started here because a
sentinel needs a writable configuration file of its own (it records what it learns there). Shared by ``tests/``
(fixtures in ``tests/replica_support.py`` and ``tests/sentinel_support.py``) and ``bench/ha.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import redis

from dataq.embedded.redis_server import PORT_ATTEMPTS, EmbeddedRedis, free_port

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


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for a topology whose servers and sentinels talk TLS: ``cert`` serves, ``client_cert`` is what
    they present to each other (replication, sentinels' probes), both signed by ``ca``."""

    ca: str
    cert: str
    key: str
    client_cert: str
    client_key: str

    def directives(self, tls_port: int) -> list[tuple[str, str]]:
        """The TLS directives of a server or sentinel listening on ``tls_port``; with ``tls-replication`` its
        links (and the addresses it announces: a replica's, a sentinel's) use the TLS ports."""
        return [("tls-port", str(tls_port)), ("tls-cert-file", self.cert), ("tls-key-file", self.key),
                ("tls-ca-cert-file", self.ca), ("tls-client-cert-file", self.client_cert),
                ("tls-client-key-file", self.client_key), ("tls-replication", "yes"), ("tls-auth-clients", "yes")]


class SentinelTopology:
    """A master and ``replicas`` replicas (roles change on fail-over), and three sentinels.

    With ``tls``, every server and sentinel also listens with TLS, links to the others with TLS, and the sentinels
    hand out the TLS ports: a client configured with :attr:`sentinel_addresses` sees TLS only. The plain ports stay
    open for this harness alone, which probes the servers through them.
    """

    master_name = MASTER_NAME

    def __init__(self, root: Path, replicas: int = 1, tls: TlsFiles | None = None,
                 down_after_ms: int = DOWN_AFTER_MS) -> None:
        self._root = root
        self._replicas = replicas
        self._tls = tls
        self._down_after_ms = down_after_ms
        self._killed: EmbeddedRedis | None = None
        self._plain_ports: dict[int, int] = {}
        """TLS port -> plain port of each server (empty without TLS)."""
        self.servers: list[EmbeddedRedis] = []
        self.sentinel_ports: list[int] = []
        self._sentinel_tls_ports: list[int] = []
        self._sentinels: list[subprocess.Popen[bytes] | None] = []

    @property
    def sentinel_addresses(self) -> list[str]:
        """Where clients find the sentinels (their TLS ports with ``tls``)."""
        return [f"{LOOPBACK}:{port}" for port in (self._sentinel_tls_ports if self._tls else self.sentinel_ports)]

    def start(self) -> None:
        master = self._server("master", MASTER_ARGS)
        master_port = self._announced_port(master)
        for index in range(self._replicas):
            self._server(f"replica-{index}", (*MASTER_ARGS, "--replicaof", LOOPBACK, str(master_port)))
        for replica in self.servers[1:]:
            wait_linked(replica)
        for index in range(3):
            self._start_sentinel(index, master_port)
        deadline = time.monotonic() + READY_TIMEOUT
        while not self._sentinels_agree(master_port):
            if time.monotonic() > deadline:
                raise AssertionError(f"the sentinels did not find each other and the replicas in time: "
                                     f"{self._sentinel_views()}")
            time.sleep(POLL)

    def current_master_address(self) -> Address:
        """The master as a live sentinel names it."""
        for port in self._live_sentinel_ports():
            with loopback_client(port) as sentinel, contextlib.suppress(redis.RedisError):
                host, master_port = sentinel.sentinel_get_master_addr_by_name(MASTER_NAME)
                return host, int(master_port)
        raise AssertionError("no sentinel answers")

    def server_at(self, address: Address) -> EmbeddedRedis:
        """The server at ``address`` (as a sentinel names it)."""
        return next(server for server in self.servers if port_of(server) == self._plain_port(address))

    def kill_master(self) -> Address:
        """SIGKILL the current master; returns its address."""
        address = self.current_master_address()
        self.server_at(address).kill()
        self._killed = self.server_at(address)
        return address

    def wait_for_failover(self, old: Address, timeout: float = READY_TIMEOUT * 2) -> Address:
        """The new master's address, once the sentinels name another server and it answers as master."""
        return wait_for_new_master(self.current_master_address, old, timeout, self._plain_port)

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
        return self.wait_for_replicas(self._replicas, timeout)

    def wait_for_replicas(self, count: int, timeout: float = READY_TIMEOUT * 2) -> Address:
        """The master's address (as the sentinels name it) once it has ``count`` streaming replicas."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(AssertionError, redis.RedisError):
                address = self.current_master_address()
                with loopback_client(self._plain_port(address)) as master:
                    info = master.info("replication")
                    online = [value for key, value in info.items()
                              if key.startswith("slave") and isinstance(value, dict) and value["state"] == "online"]
                    if info.get("role") == "master" and len(online) >= count:
                        return address
            if time.monotonic() > deadline:
                raise AssertionError(f"no master with {count} streaming replica(s) within {timeout} s")
            time.sleep(POLL)

    def wait_for_sentinels_to_name(self, address: Address, timeout: float = READY_TIMEOUT) -> None:
        """Return once every live sentinel names ``address`` the master (they learn a fail-over from its leader
        within a second or two)."""
        deadline = time.monotonic() + timeout
        while not self._sentinels_agree(address[1]):
            if time.monotonic() > deadline:
                raise AssertionError(f"the sentinels do not all name {address} the master after {timeout} s")
            time.sleep(POLL)

    def pause_master(self) -> Address:
        """SIGSTOP the current master (the sentinels take it for down, as if cut off); returns its address."""
        address = self.current_master_address()
        _signal(self.server_at(address), signal.SIGSTOP)
        return address

    def resume(self, address: Address) -> None:
        """SIGCONT the server at ``address``: a paused master comes back still a master, until the sentinels
        reach it and make it a replica of the one they elected meanwhile."""
        _signal(self.server_at(address), signal.SIGCONT)

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
        tls_port = None
        if self._tls is not None:
            tls_port = free_port()
            args = (*args, *(word for key, value in self._tls.directives(tls_port) for word in (f"--{key}", value)))
        server = EmbeddedRedis(self._root / name, port=0, appendfsync="always", extra_args=args)
        self.servers.append(server)
        server.start()
        if tls_port:
            self._plain_ports[tls_port] = port_of(server)
        return server

    def _announced_port(self, server: EmbeddedRedis) -> int:
        """The port the sentinels and replicas know ``server`` by."""
        plain = port_of(server)
        return next((tls for tls, port in self._plain_ports.items() if port == plain), plain)

    def _plain_port(self, address: Address) -> int:
        """The port this harness probes the server at ``address`` through."""
        return self._plain_ports.get(address[1], address[1])

    def _start_sentinel(self, index: int, master_port: int) -> None:
        """Start sentinel ``index`` on free ports, and again on others if one was taken before it could bind it
        (by a client's outgoing connection, say: the ports ``free_port`` finds are not held for us)."""
        directory = self._root / f"sentinel-{index}"
        directory.mkdir()
        log = directory / "sentinel.log"
        for _ in range(PORT_ATTEMPTS):
            port = free_port()
            tls_port = free_port() if self._tls else None
            tls_lines = ""
            if self._tls and tls_port:
                tls_lines = "".join(f"{key} {value}\n" for key, value in self._tls.directives(tls_port))
            config = directory / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind {LOOPBACK}\ndir {directory}\nlogfile {log}\n{tls_lines}"
                f"sentinel monitor {MASTER_NAME} {LOOPBACK} {master_port} {QUORUM}\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {self._down_after_ms}\n"
                f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            executable = shutil.which("redis-server") or "/usr/bin/redis-server"
            process = subprocess.Popen([executable, str(config), "--sentinel"], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            if _answers_ping(process, port):
                self._sentinels.append(process)
                self.sentinel_ports.append(port)
                if tls_port:
                    self._sentinel_tls_ports.append(tls_port)
                return
        tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
        raise AssertionError(f"sentinel {index} did not start in {PORT_ATTEMPTS} tries: {tail}")

    def _sentinel_views(self) -> list[str]:
        """What each sentinel knows: the master it names, how many other sentinels and replicas (for errors)."""
        views = []
        for port, process in zip(self.sentinel_ports, self._sentinels, strict=True):
            if process is None or process.poll() is not None:
                views.append(f"{port}: not running")
                continue
            with loopback_client(port) as sentinel:
                try:
                    views.append(f"{port}: master {sentinel.sentinel_get_master_addr_by_name(MASTER_NAME)}, "
                                 f"{len(sentinel.sentinel_sentinels(MASTER_NAME))} other sentinels, "
                                 f"{len(sentinel.sentinel_slaves(MASTER_NAME))} replicas")
                except redis.RedisError as exc:
                    views.append(f"{port}: {exc}")
        return views

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


def _answers_ping(process: subprocess.Popen[bytes], port: int, timeout: float = READY_TIMEOUT) -> bool:
    """Whether a started sentinel answers on ``port`` (False once it has exited: a redis-server that cannot bind
    a port exits); killed if it neither answers nor exits in time."""
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        with contextlib.suppress(redis.RedisError), loopback_client(port) as sentinel:
            if sentinel.ping():
                return True
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            return False
        time.sleep(POLL)
    return False


def _signal(server: EmbeddedRedis, number: signal.Signals) -> None:
    pid = server.pid
    assert pid is not None, f"{server.url} does not run"
    os.kill(pid, number)


def wait_for_new_master(named: Callable[[], Address], old: Address, timeout: float,
                        probe_port: Callable[[Address], int] = lambda address: address[1]) -> Address:
    """The address ``named`` gives once it is not ``old`` and the server there answers as a master (``named``
    may raise AssertionError or a Redis error while nobody can tell), asked on its plain ``probe_port``."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(AssertionError, redis.RedisError):
            address = named()
            if address != old:
                with loopback_client(probe_port(address)) as server:
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
