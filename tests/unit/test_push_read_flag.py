"""The push daemon's ``read`` flag, through its four transitions (operator switch, Redis answer, rule cut-off,
rule clear), in every order that has gone wrong before: an answer older than what the daemon knows is dropped, so
the daemon neither reads while Redis says off nor forgets why it turned reading off; and an operator's word, even
one that comes while the daemon waits on Redis, is never undone by a cut-off or by its end.

Redis is a double here (:class:`FlagInRedis`) whose reads and writes the test can hold, so the order of events is
the test's own. The CI failure of d8bb619 was a Redis restart (notices lost), then a heartbeat's read of the flags
crossing the memory watch's cut-off."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import cast

import pytest

from dataq.errors import StoreUnavailable
from dataq.push.cutoff import MEMORY_HIGH, QUEUE_FULL, ReadCutoff
from dataq.push.gate import BLOCK_STARTING, Gate
from dataq.push.read_flag import ReadFlag
from dataq.store import QueueStore
from tests.pop_support import RecordingNotifier
from tests.push_support import QUEUE, push_settings

OOM = "OOM command not allowed when used memory > 'maxmemory'"


class FlagInRedis:
    """The ``read`` flag as Redis holds it. A held read (or write) takes effect at once but returns only once the
    test lets it; ``refusals``: how many of the next writes Redis refuses."""

    def __init__(self) -> None:
        self.on = True
        self.writes: list[bool] = []
        self.refusals = 0
        self._held_read: tuple[asyncio.Event, asyncio.Event] | None = None
        self._held_write: tuple[asyncio.Event, asyncio.Event] | None = None

    def hold_next_read(self) -> tuple[asyncio.Event, asyncio.Event]:
        """(set once the next read has read Redis, set it to let that read return)."""
        self._held_read = asyncio.Event(), asyncio.Event()
        return self._held_read

    def hold_next_write(self) -> tuple[asyncio.Event, asyncio.Event]:
        """(set once the next write has been sent, set it to let that write land and return)."""
        self._held_write = asyncio.Event(), asyncio.Event()
        return self._held_write

    async def read(self) -> bool:
        on, held, self._held_read = self.on, self._held_read, None
        if held is not None:
            held[0].set()
            await held[1].wait()
        return on

    async def write(self, on: bool) -> None:
        held, self._held_write = self._held_write, None
        if held is not None:
            held[0].set()
            await held[1].wait()
        if self.refusals:
            self.refusals -= 1
            raise StoreUnavailable(OOM)
        self.writes.append(on)
        self.on = on


@pytest.fixture
def redis() -> FlagInRedis:
    return FlagInRedis()


@pytest.fixture
def gate() -> Gate:
    """The daemon's gate, which the listener watches."""
    return Gate()


@pytest.fixture
async def flag(redis: FlagInRedis, gate: Gate) -> ReadFlag:
    """A daemon's flag after its first read of Redis (``read`` on), as at its start."""
    read_flag = ReadFlag(gate, redis.read, redis.write)
    await read_flag.refresh("start")
    assert read_flag.on
    return read_flag


async def operator_switches(redis: FlagInRedis, flag: ReadFlag, on: bool) -> None:
    """``dataq-cli --read``: Redis first, then its notice reaches the daemon."""
    redis.on = on
    flag.operator_switch(on)


def started(coroutine: Coroutine[None, None, object]) -> asyncio.Task[object]:
    return asyncio.create_task(coroutine)


# --- operator switch ----------------------------------------------------------------------------------------


async def test_the_gate_stays_closed_until_the_flag_is_first_known(redis: FlagInRedis) -> None:
    gate = Gate()
    read_flag = ReadFlag(gate, redis.read, redis.write)
    assert gate.blocks(BLOCK_STARTING) and not gate.open
    read_flag.operator_switch(False)
    assert not gate.blocks(BLOCK_STARTING) and not gate.open
    read_flag.operator_switch(True)
    assert gate.open


async def test_an_operators_switch_on_forgets_every_reason_of_the_daemons(
    flag: ReadFlag, redis: FlagInRedis, gate: Gate
) -> None:
    await flag.cut_off(QUEUE_FULL)
    await operator_switches(redis, flag, True)
    assert flag.on and flag.reasons == frozenset() and gate.open


# --- Redis answer -------------------------------------------------------------------------------------------


async def test_an_answer_with_nothing_crossing_it_is_taken(
    flag: ReadFlag, redis: FlagInRedis, gate: Gate
) -> None:
    redis.on = False  # an operator's switch, its notice lost
    await flag.refresh("poll")
    assert not flag.on and not gate.open


async def test_an_answer_read_before_a_cut_off_and_returned_after_it_is_dropped(
    flag: ReadFlag, redis: FlagInRedis, gate: Gate
) -> None:
    read, let_it_return = redis.hold_next_read()
    poll = started(flag.refresh("poll"))
    await read.wait()  # it read ``read on``
    await flag.cut_off(QUEUE_FULL)
    let_it_return.set()
    await poll
    assert not redis.on and not flag.on and not gate.open
    assert flag.reasons == {QUEUE_FULL}  # so the rule's clear turns reading on again


async def test_an_answer_read_while_a_cut_off_was_being_saved_is_dropped(flag: ReadFlag, redis: FlagInRedis) -> None:
    """The cut-off's write lands after the read, yet is acknowledged before the read's answer comes back."""
    sent, let_it_land = redis.hold_next_write()
    cutting_off = started(flag.cut_off(QUEUE_FULL))
    await sent.wait()  # reading is off here; Redis does not know yet
    read, let_it_return = redis.hold_next_read()
    poll = started(flag.refresh("poll"))
    await read.wait()  # it read ``read on``
    let_it_land.set()
    await cutting_off
    let_it_return.set()
    await poll
    assert not redis.on and not flag.on and flag.reasons == {QUEUE_FULL}


async def test_an_answer_that_crossed_a_notice_is_dropped(flag: ReadFlag, redis: FlagInRedis) -> None:
    read, let_it_return = redis.hold_next_read()
    poll = started(flag.refresh("poll"))
    await read.wait()  # it read ``read on``
    await operator_switches(redis, flag, False)
    let_it_return.set()
    await poll
    assert not flag.on


# --- rule cut-off -------------------------------------------------------------------------------------------


async def test_a_cut_off_stops_reading_at_once_and_saves_off_once(flag: ReadFlag, redis: FlagInRedis) -> None:
    assert await flag.cut_off(QUEUE_FULL)
    assert await flag.cut_off(MEMORY_HIGH)  # a second reason, while off already: nothing more to save
    assert redis.writes == [False] and not flag.on and flag.reasons == {QUEUE_FULL, MEMORY_HIGH}


async def test_reading_an_operator_turned_off_is_not_the_rules_to_hold(flag: ReadFlag, redis: FlagInRedis) -> None:
    await operator_switches(redis, flag, False)
    assert not flag.may_cut_off(QUEUE_FULL)
    assert not await flag.cut_off(QUEUE_FULL)
    assert flag.reasons == frozenset() and redis.writes == []


async def test_a_cut_off_redis_refused_is_saved_by_a_later_heartbeat(flag: ReadFlag, redis: FlagInRedis) -> None:
    redis.refusals = 2
    await flag.cut_off(QUEUE_FULL)
    await flag.save_missed()  # refused again
    assert redis.on and flag.unsaved and not flag.may_clear(QUEUE_FULL)
    await flag.save_missed()
    assert not redis.on and not flag.unsaved and flag.may_clear(QUEUE_FULL)


async def test_a_heartbeat_during_the_cut_offs_save_does_not_save_it_twice(flag: ReadFlag, redis: FlagInRedis) -> None:
    """A second write would be a second switch in the events stream and a second notice to every daemon."""
    sent, let_it_land = redis.hold_next_write()
    cutting_off = started(flag.cut_off(MEMORY_HIGH))
    await sent.wait()
    await flag.save_missed()  # the heartbeat, while the save is under way
    let_it_land.set()
    await cutting_off
    assert redis.writes == [False]
    assert await flag.clear(MEMORY_HIGH)
    assert redis.writes == [False, True] and flag.on


async def test_an_operators_switch_on_while_redis_refuses_the_cut_off_is_not_undone_by_its_retry(
    flag: ReadFlag, redis: FlagInRedis, gate: Gate
) -> None:
    """Redis refused the cut-off (out of memory, say), then the operator turned reading on: the heartbeat's retry
    must not turn it off again, with no reason left to ever turn it back on."""
    redis.refusals = 1
    await flag.cut_off(QUEUE_FULL)
    assert not flag.on and flag.unsaved
    await operator_switches(redis, flag, True)
    await flag.save_missed()  # the heartbeat
    assert redis.on and flag.on and gate.open and redis.writes == []


# --- rule clear ---------------------------------------------------------------------------------------------


async def test_reading_comes_back_only_when_the_last_reason_is_cleared(
    flag: ReadFlag, redis: FlagInRedis, gate: Gate
) -> None:
    await flag.cut_off(QUEUE_FULL)
    await flag.cut_off(MEMORY_HIGH)
    assert not await flag.clear(MEMORY_HIGH)
    assert not flag.on and not flag.may_clear(MEMORY_HIGH) and flag.may_clear(QUEUE_FULL)
    assert await flag.clear(QUEUE_FULL)
    assert redis.writes == [False, True] and flag.on and gate.open


async def test_a_clear_redis_refused_keeps_its_reason_so_the_rule_tries_again(
    flag: ReadFlag, redis: FlagInRedis
) -> None:
    await flag.cut_off(QUEUE_FULL)
    redis.refusals = 1
    with pytest.raises(StoreUnavailable):
        await flag.clear(QUEUE_FULL)
    assert not flag.on and flag.may_clear(QUEUE_FULL)
    assert await flag.clear(QUEUE_FULL)
    assert flag.on and redis.on


# --- the rules, measuring across an operator's switch ------------------------------------------------------


class MemoryOnly:
    """What the memory rule asks of the store: Redis's memory, which the test sets (and ``meanwhile``, an
    operator's switch while the daemon waits for the answer)."""

    def __init__(self) -> None:
        self.used = 0
        self.during: Callable[[], Awaitable[None]] | None = None

    async def memory_usage(self) -> tuple[int, int]:
        if self.during is not None:
            during, self.during = self.during, None
            await during()
        return self.used, 0


@pytest.fixture
def memory_rule(flag: ReadFlag, tmp_path: Path) -> tuple[ReadCutoff, MemoryOnly]:
    settings = push_settings("redis://127.0.0.1:1", tmp_path, max_memory=1000.0, resume_memory=500.0)
    store = MemoryOnly()
    rule = ReadCutoff(cast(QueueStore, store), settings.queue(QUEUE), settings.push, RecordingNotifier(), flag)
    return rule, store


async def test_the_memory_cut_off_ends_by_itself_when_nobody_else_switched(
    memory_rule: tuple[ReadCutoff, MemoryOnly], flag: ReadFlag, redis: FlagInRedis
) -> None:
    rule, store = memory_rule
    store.used = 2000
    await rule.memory()
    assert not redis.on and not flag.on
    store.used = 600  # below max_memory, not yet below resume_memory
    await rule.memory()
    assert not flag.on
    store.used = 100
    await rule.memory()
    assert redis.on and flag.on


async def test_an_operators_switch_off_during_the_memory_read_is_not_taken_for_the_daemons_own(
    memory_rule: tuple[ReadCutoff, MemoryOnly], flag: ReadFlag, redis: FlagInRedis
) -> None:
    rule, store = memory_rule
    store.used = 2000

    async def operator() -> None:
        await operator_switches(redis, flag, False)

    store.during = operator
    await rule.memory()  # high; but reading is the operator's to turn on now
    assert flag.reasons == frozenset()
    store.used = 100
    await rule.memory()  # low again
    assert not redis.on and not flag.on
