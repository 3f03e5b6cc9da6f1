"""The parts of redis-py that dataq overrides or calls below its public API, held to the signatures they were
written against: a redis-py release that changes one fails here, by name, instead of in a fail-over.

setup.cfg pins redis-py below its next major version; within it, these are the internals to re-read when this
test fails (and the override in dataq to adapt with them)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest
from redis.asyncio.cluster import NodesManager, RedisCluster
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from dataq.store import closed_writes
from dataq.store.cluster import SlotConnection, SlotConnectionPool
from dataq.store.sentinel import FollowingPool, SerialSentinel

WRITTEN_AGAINST_MAJOR = 8

OVERRIDDEN: list[tuple[str, Callable[..., Any], Callable[..., Any], list[str]]] = [
    # (what dataq overrides, redis-py's method, dataq's, the parameters both must take)
    ("SerialSentinel.__init__", Sentinel.__init__, SerialSentinel.__init__, ["self", "sentinels"]),
    ("SerialSentinel.discover_master", Sentinel.discover_master, SerialSentinel.discover_master,
     ["self", "service_name"]),
    ("FollowingPool.release", SentinelConnectionPool.release, FollowingPool.release, ["self", "connection"]),
    ("SlotConnectionPool.make_connection", ConnectionPool.make_connection, SlotConnectionPool.make_connection,
     ["self"]),
    ("SlotConnection.connect_check_health", AbstractConnection.connect_check_health,
     SlotConnection.connect_check_health, ["self", "check_health", "retry_socket_connect"]),
    ("closed_writes.send_if_open", closed_writes.REPLACED, closed_writes.send_if_open, ["self", "command"]),
]

CALLED = [
    # (what dataq calls below the public API, the parameters it passes by name or position)
    (AbstractConnection.read_response, ["self", "disable_decoding", "timeout"]),
    (AbstractConnection.send_packed_command, ["self", "command", "check_health"]),
    (AbstractConnection.pack_commands, ["self", "commands"]),
    (ConnectionPool.get_connection, ["self"]),
    (ConnectionPool.release, ["self", "connection"]),
    (ConnectionPool.disconnect, ["self", "inuse_connections"]),
    (SentinelConnectionPool.get_master_address, ["self"]),
    (Sentinel.check_master_state, ["self", "state", "service_name"]),
    (NodesManager.initialize, ["self"]),
    (NodesManager.get_node_from_slot, ["self", "slot"]),
    (RedisCluster.keyslot, ["self", "key"]),
]


def positional(function: Callable[..., Any]) -> list[str]:
    return [name for name, parameter in inspect.signature(function).parameters.items()
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)]


def test_redis_py_is_the_major_version_dataq_was_written_against() -> None:
    assert int(version("redis").split(".")[0]) == WRITTEN_AGAINST_MAJOR


@pytest.mark.parametrize(("name", "theirs", "ours", "expected"), OVERRIDDEN, ids=[row[0] for row in OVERRIDDEN])
def test_each_overridden_internal_still_has_the_signature_it_was_written_against(
    name: str, theirs: Callable[..., Any], ours: Callable[..., Any], expected: list[str]
) -> None:
    assert positional(theirs)[: len(expected)] == expected, (
        f"redis-py changed {theirs.__qualname__}{inspect.signature(theirs)}: re-read it and adapt {name}")
    assert positional(ours)[: len(expected)] == expected


def test_the_read_response_override_passes_every_argument_through() -> None:
    """SlotConnection.read_response wraps redis-py's with ``*args, **kwargs``: whatever it takes, it gets."""
    parameters = inspect.signature(SlotConnection.read_response).parameters
    assert [p.kind for p in parameters.values()] == [
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]
    assert SlotConnection.read_response is not AbstractConnection.read_response


@pytest.mark.parametrize(("function", "expected"), CALLED, ids=[row[0].__qualname__ for row in CALLED])
def test_each_internal_dataq_calls_still_takes_what_dataq_passes(
    function: Callable[..., Any], expected: list[str]
) -> None:
    assert positional(function)[: len(expected)] == expected, (
        f"redis-py changed {function.__qualname__}{inspect.signature(function)}")


def test_every_command_with_a_socket_timeout_is_written_by_the_replaced_write() -> None:
    """closed_writes replaces ``_send_packed_command``: redis-py must still write through it when a connection has
    a socket timeout, as every dataq connection has."""
    source = inspect.getsource(AbstractConnection.send_packed_command)
    assert "if self.socket_timeout:" in source and "self._send_packed_command(command)" in source
    assert AbstractConnection._send_packed_command is closed_writes.send_if_open


def test_the_attributes_dataq_reads_of_redis_py_objects_are_still_there() -> None:
    pool = SentinelConnectionPool("mymaster", Sentinel([("127.0.0.1", 1)]))  # type: ignore[no-untyped-call]
    assert hasattr(pool, "master_address") and hasattr(pool, "connection_kwargs")
    cluster = RedisCluster(host="127.0.0.1", port=1)
    manager = cluster.nodes_manager
    assert isinstance(manager.startup_nodes, dict) and isinstance(manager.nodes_cache, dict)
