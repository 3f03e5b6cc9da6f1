"""The store's lane packs commands in C (hiredis) byte for byte as redis-py would, and leaves to redis-py what
hiredis will not pack."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection

from dataq.store.lane import packed


def test_commands_are_packed_as_redis_py_packs_them() -> None:
    connection = Connection()
    commands = [("EVALSHA", "a" * 40, 2, "dq:{q}:records", "dq:{q}:active", 7, 1.5, -3, b"\x00\xff" * 9000,
                 "é" * 4000, ""), ("WAIT", 1, 500)]
    assert b"".join(packed(connection, commands)) == b"".join(connection.pack_commands(commands))


def test_a_connection_that_encodes_otherwise_is_packed_as_it_encodes() -> None:
    connection = Connection(encoding="latin-1")
    commands = [("HSET", "dq:{q}:records", "café", "é")]
    assert b"".join(packed(connection, commands)) == b"".join(connection.pack_commands(commands))
    assert "café".encode("latin-1") in b"".join(packed(connection, commands))


def test_a_string_that_is_not_utf8_is_refused_as_redis_py_refuses_it() -> None:
    connection = Connection()
    with pytest.raises(UnicodeEncodeError):
        connection.pack_commands([("HSET", "k", "bad-\udcff")])
    with pytest.raises(UnicodeEncodeError):
        packed(connection, [("HSET", "k", "bad-\udcff")])
