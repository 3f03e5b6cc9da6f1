"""How dataq asks the sentinels for the master (:class:`SerialSentinel`), with sentinels that answer on cue."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import redis.exceptions as rexc
from redis.asyncio.sentinel import MasterNotFoundError

from dataq.store.sentinel import SerialSentinel

NAME = "dataq"


class ScriptedSentinel:
    """A sentinel's client that answers ``SENTINEL MASTERS`` with a given reply (or raises it)."""

    def __init__(self, port: int, answer: dict[str, Any] | Exception) -> None:
        self.connection_pool = SimpleNamespace(connection_kwargs={"host": "10.0.0.9", "port": port})
        self._answer = answer

    async def sentinel_masters(self) -> dict[str, Any]:
        await asyncio.sleep(0)  # a reply takes a turn of the loop, as over a socket
        if isinstance(self._answer, Exception):
            raise self._answer
        return self._answer


def master_state(port: int, flags: str = "master") -> dict[str, Any]:
    """A master's entry in ``SENTINEL MASTERS`` as redis-py parses it (RESP2: flags as text)."""
    marks = set(flags.split(","))
    return {NAME: {"name": NAME, "ip": "10.0.0.1", "port": port, "flags": flags, "is_master": "master" in marks,
                   "is_sdown": "s_down" in marks, "is_odown": "o_down" in marks, "num-other-sentinels": 2}}


def manager(*sentinels: ScriptedSentinel) -> SerialSentinel:
    serial = SerialSentinel([("10.0.0.9", 1)])
    serial.sentinels = list(sentinels)
    return serial


async def test_the_first_sentinel_naming_a_healthy_master_answers_and_is_asked_first_next_time() -> None:
    down = ScriptedSentinel(26379, rexc.ConnectionError("Connection refused"))
    up = ScriptedSentinel(26380, master_state(6380))
    serial = manager(down, up)
    assert await serial.discover_master(NAME) == ("10.0.0.1", 6380)
    assert serial.sentinels == [up, down]


async def test_a_sentinel_leading_a_failover_is_passed_over_for_one_that_names_the_new_master() -> None:
    # The leader lists the old master until its fail-over ends; back up, the old master looks healthy there.
    leader = ScriptedSentinel(26379, master_state(6379, "master,failover_in_progress"))
    follower = ScriptedSentinel(26380, master_state(6380))
    assert await manager(leader, follower).discover_master(NAME) == ("10.0.0.1", 6380)


async def test_when_no_sentinel_names_a_master_the_error_says_what_each_one_answered() -> None:
    serial = manager(
        ScriptedSentinel(26379, rexc.ConnectionError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")),
        ScriptedSentinel(26380, master_state(6379, "s_down,o_down,master")),
        ScriptedSentinel(26381, master_state(6379, "master,failover_in_progress")),
        ScriptedSentinel(26382, rexc.TimeoutError()),
    )
    with pytest.raises(MasterNotFoundError) as raised:
        await serial.discover_master(NAME)
    assert str(raised.value) == (
        "no sentinel names a master for 'dataq' ("
        "10.0.0.9:26379: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed; "
        "10.0.0.9:26380: no master 'dataq' that is up; "
        "10.0.0.9:26381: leads a fail-over of 'dataq'; "
        "10.0.0.9:26382: TimeoutError)"
    )


async def test_callers_at_once_leave_every_sentinel_in_the_list_once() -> None:
    sentinels = [ScriptedSentinel(26379 + index, rexc.ConnectionError("down")) for index in range(2)]
    sentinels.append(ScriptedSentinel(26381, master_state(6380)))
    serial = manager(*sentinels)
    answers = await asyncio.gather(*(serial.discover_master(NAME) for _ in range(20)))
    assert set(answers) == {("10.0.0.1", 6380)}
    assert sorted(serial.sentinels, key=id) == sorted(sentinels, key=id)
