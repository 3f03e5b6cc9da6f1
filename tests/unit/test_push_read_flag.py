"""The push daemon's ``read`` flag when its own cut-off crosses a read of the flags or an operator's switch: an
answer older than what the daemon knows is dropped, so the daemon neither reads while Redis says off nor forgets
why it turned reading off; and an operator's word, even one that comes while the daemon waits on Redis, is never
undone by the cut-off or by its end.

The daemon is not run: its flag handling is driven here step by step, notices included (``notice`` does what the
daemon's subscription does with one), so the order is the test's. The CI failure of d8bb619 was a Redis restart
(notices lost), then a heartbeat's read of the flags crossing the memory watch's cut-off."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from dataq.errors import StoreUnavailable
from dataq.push.cutoff import AUTO_WHO, QUEUE_FULL
from dataq.push.daemon import PushDaemon
from dataq.store import Flag
from testbed.actions import fake_store
from tests.pop_support import RecordingNotifier
from tests.push_support import QUEUE, push_settings

MAX_QUEUE_SIZE = 10
FULL = MAX_QUEUE_SIZE + 1
MEMORY = {"max_memory": 1000.0, "resume_memory": 500.0}
"""In bytes: what ``memory_usage`` answers is the test's (see ``memory_answers``)."""


@pytest.fixture
async def daemon(tmp_path: Path) -> PushDaemon:
    """A push daemon on fakeredis (not run), reading: its flags read once, as at its start. It watches the queue's
    length (MAX_QUEUE_SIZE) and Redis's memory (MEMORY)."""
    settings = push_settings("redis://127.0.0.1:1", tmp_path, max_queue_size=MAX_QUEUE_SIZE, **MEMORY)
    store = fake_store(QUEUE)
    built = PushDaemon(settings, settings.queue(QUEUE), store, asyncio.Event(), notifier=RecordingNotifier())
    await built._poll_flags("start")
    assert built.read_on
    return built


def notice(daemon: PushDaemon, on: bool) -> None:
    """What the daemon does with a ``flag:read:on|off`` notice."""
    daemon._set_read(on, "notice")


async def operator_switches(daemon: PushDaemon, on: bool) -> None:
    await daemon.store.set_flag(Flag.READ, on, who="operator")
    notice(daemon, on)


def memory_answers(daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch, used: int,
                   meanwhile: Callable[[], Awaitable[None]] | None = None) -> None:
    """Redis's ``used_memory`` is ``used`` (no maxmemory); ``meanwhile`` happens while the daemon waits for it."""
    async def memory_usage() -> tuple[int, int]:
        if meanwhile is not None:
            await meanwhile()
        return used, 0
    monkeypatch.setattr(daemon.store, "memory_usage", memory_usage)


def flags_answers_held(daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch, *, until: asyncio.Event,
                       answered: asyncio.Event | None = None) -> asyncio.Event:
    """The daemon's reads of the flags read Redis at once, but return their answer only once ``until`` is set;
    returns ``answered`` (or a new event), set once one has read."""
    read_flags, answered = daemon.store.flags, answered or asyncio.Event()

    async def held() -> dict[Flag, bool]:
        flags = await read_flags()
        answered.set()
        await until.wait()
        return flags

    monkeypatch.setattr(daemon.store, "flags", held)
    return answered


async def read_in_redis(daemon: PushDaemon) -> bool:
    return (await daemon.store.flags())[Flag.READ]


async def cut_off_is_kept(daemon: PushDaemon) -> None:
    assert not await read_in_redis(daemon)
    assert not daemon.read_on and not daemon.gate.open
    assert daemon.cutoff.reasons == {QUEUE_FULL}  # so the queue draining turns reading on again


async def test_an_answer_read_before_the_cut_off_and_returned_after_it_is_dropped(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    let_it_return = asyncio.Event()
    answered = flags_answers_held(daemon, monkeypatch, until=let_it_return)
    poll = asyncio.create_task(daemon._poll_flags("poll"))
    await answered.wait()  # it read ``read on``
    monkeypatch.undo()
    await daemon.cutoff.queue_length(FULL)
    let_it_return.set()
    await poll
    await cut_off_is_kept(daemon)


async def test_an_answer_read_while_the_cut_off_was_being_saved_is_dropped(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_flag = daemon.store.set_flag
    saving, answered, saved = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def set_flag_once_answered(flag: Flag, on: bool, who: str = "cli") -> bool:
        saving.set()
        await answered.wait()
        try:
            return await set_flag(flag, on, who)
        finally:
            saved.set()

    monkeypatch.setattr(daemon.store, "set_flag", set_flag_once_answered)
    cutting_off = asyncio.create_task(daemon.cutoff.queue_length(FULL))
    await saving.wait()  # reading is off here; Redis does not know yet
    flags_answers_held(daemon, monkeypatch, until=saved, answered=answered)
    await daemon._poll_flags("poll")  # it read ``read on``, and returns once Redis acknowledged the cut-off
    await cutting_off
    monkeypatch.undo()
    await cut_off_is_kept(daemon)


async def test_an_answer_with_nothing_crossing_it_is_taken(daemon: PushDaemon) -> None:
    await daemon.store.set_flag(Flag.READ, False, who="operator")
    await daemon._poll_flags("poll")  # the operator's switch, its notice lost
    assert not daemon.read_on and not daemon.gate.open


async def test_an_operators_switch_on_while_redis_refuses_the_cut_off_is_not_undone_by_its_retry(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis refused the cut-off (out of memory, say), then the operator turned reading on: the heartbeat's retry
    of the cut-off must not turn it off again, with no reason left to ever turn it back on."""
    set_flag = daemon.store.set_flag

    async def refused_to_the_daemon(flag: Flag, on: bool, who: str = "cli") -> bool:
        if who == AUTO_WHO:
            raise StoreUnavailable("OOM command not allowed when used memory > 'maxmemory'")
        return await set_flag(flag, on, who)

    monkeypatch.setattr(daemon.store, "set_flag", refused_to_the_daemon)
    await daemon.cutoff.queue_length(FULL)
    assert not daemon.read_on and daemon.cutoff.unsaved
    await operator_switches(daemon, True)
    monkeypatch.undo()
    await daemon.cutoff.check()  # the heartbeat
    assert await read_in_redis(daemon) and daemon.read_on and daemon.gate.open


async def test_an_operators_switch_off_during_the_memory_read_is_not_taken_for_the_daemons_own(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_answers(daemon, monkeypatch, 2000, meanwhile=lambda: operator_switches(daemon, False))
    await daemon.cutoff.memory()  # high; but reading is the operator's to turn on now
    assert daemon.cutoff.reasons == set()
    memory_answers(daemon, monkeypatch, 100)
    await daemon.cutoff.memory()  # low again
    assert not await read_in_redis(daemon) and not daemon.read_on


async def test_the_memory_cut_off_ends_by_itself_when_nobody_else_switched(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_answers(daemon, monkeypatch, 2000)
    await daemon.cutoff.memory()
    assert not await read_in_redis(daemon) and not daemon.read_on
    memory_answers(daemon, monkeypatch, 600)  # below max_memory, not yet below resume_memory
    await daemon.cutoff.memory()
    assert not daemon.read_on
    memory_answers(daemon, monkeypatch, 100)
    await daemon.cutoff.memory()
    assert await read_in_redis(daemon) and daemon.read_on and daemon.gate.open


async def test_a_heartbeat_during_the_cut_offs_save_does_not_save_it_twice(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One write of the cut-off: a second, sent by the heartbeat while the first is under way, would be a second
    switch in the events stream and a second notice to every daemon."""
    set_flag = daemon.store.set_flag
    saving, let_it_save = asyncio.Event(), asyncio.Event()
    writes: list[bool] = []

    async def set_flag_held(flag: Flag, on: bool, who: str = "cli") -> bool:
        writes.append(on)
        if not saving.is_set():
            saving.set()
            await let_it_save.wait()
        return await set_flag(flag, on, who)

    monkeypatch.setattr(daemon.store, "set_flag", set_flag_held)
    memory_answers(daemon, monkeypatch, 2000)
    cutting_off = asyncio.create_task(daemon.cutoff.memory())
    await saving.wait()
    await daemon.cutoff.check()  # the heartbeat, while the save is under way
    let_it_save.set()
    await cutting_off
    assert writes == [False] and not await read_in_redis(daemon)
    memory_answers(daemon, monkeypatch, 100)
    await daemon.cutoff.memory()
    assert writes == [False, True] and await read_in_redis(daemon) and daemon.read_on


async def test_a_cut_off_redis_refused_is_saved_by_a_later_heartbeat(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals = 2
    set_flag = daemon.store.set_flag

    async def refused_at_first(flag: Flag, on: bool, who: str = "cli") -> bool:
        nonlocal refusals
        if refusals:
            refusals -= 1
            raise StoreUnavailable("OOM command not allowed when used memory > 'maxmemory'")
        return await set_flag(flag, on, who)

    monkeypatch.setattr(daemon.store, "set_flag", refused_at_first)
    await daemon.cutoff.queue_length(FULL)
    await daemon.cutoff.check()  # refused again
    assert await read_in_redis(daemon) and daemon.cutoff.unsaved
    await daemon.cutoff.check()
    assert not daemon.cutoff.unsaved
    await cut_off_is_kept(daemon)
