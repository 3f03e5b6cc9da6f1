"""The push daemon's ``read`` flag when a read of the flags and its own cut-off cross: an answer older than what
the daemon knows is dropped, so the daemon neither reads while Redis says off nor forgets why it turned reading
off. No notice flows here (the daemon is not run), as when its subscription is down: the CI failure of d8bb619
was a Redis restart, then a heartbeat's read of the flags crossing the memory watch's cut-off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dataq.push.cutoff import QUEUE_FULL
from dataq.push.daemon import PushDaemon
from dataq.store import Flag
from tests.helpers import fake_store
from tests.pop_support import RecordingNotifier
from tests.push_support import QUEUE, push_settings

MAX_QUEUE_SIZE = 10
FULL = MAX_QUEUE_SIZE + 1


@pytest.fixture
async def daemon(tmp_path: Path) -> PushDaemon:
    """A push daemon on fakeredis (not run), reading: its flags read once, as at its start."""
    settings = push_settings("redis://127.0.0.1:1", tmp_path, max_queue_size=MAX_QUEUE_SIZE)
    store = fake_store(QUEUE)
    built = PushDaemon(settings, settings.queue(QUEUE), store, asyncio.Event(), notifier=RecordingNotifier())
    await built._poll_flags("start")
    assert built.read_on
    return built


async def cut_off_is_kept(daemon: PushDaemon) -> None:
    assert not (await daemon.store.flags())[Flag.READ]
    assert not daemon.read_on and not daemon.gate.open
    assert daemon.cutoff.reasons == {QUEUE_FULL}  # so the queue draining turns reading on again


async def test_an_answer_read_before_the_cut_off_and_returned_after_it_is_dropped(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_flags = daemon.store.flags
    answered, let_it_return = asyncio.Event(), asyncio.Event()

    async def flags_answered_early() -> dict[Flag, bool]:
        flags = await read_flags()
        answered.set()
        await let_it_return.wait()
        return flags

    monkeypatch.setattr(daemon.store, "flags", flags_answered_early)
    poll = asyncio.create_task(daemon._poll_flags("poll"))
    await answered.wait()  # it read ``read on``
    monkeypatch.undo()
    await daemon.cutoff.queue_length(FULL, daemon.read_on)
    let_it_return.set()
    await poll
    await cut_off_is_kept(daemon)


async def test_an_answer_read_while_the_cut_off_was_being_saved_is_dropped(
    daemon: PushDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_flags, set_flag = daemon.store.flags, daemon.store.set_flag
    saving, answered, saved = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def set_flag_once_answered(flag: Flag, on: bool, who: str = "cli") -> bool:
        saving.set()
        await answered.wait()
        try:
            return await set_flag(flag, on, who)
        finally:
            saved.set()

    async def flags_returned_after_the_save() -> dict[Flag, bool]:
        flags = await read_flags()
        answered.set()
        await saved.wait()
        return flags

    monkeypatch.setattr(daemon.store, "set_flag", set_flag_once_answered)
    cutting_off = asyncio.create_task(daemon.cutoff.queue_length(FULL, daemon.read_on))
    await saving.wait()  # reading is off here; Redis does not know yet
    monkeypatch.setattr(daemon.store, "flags", flags_returned_after_the_save)
    await daemon._poll_flags("poll")  # it read ``read on``, and returns once Redis acknowledged the cut-off
    await cutting_off
    monkeypatch.undo()
    await cut_off_is_kept(daemon)


async def test_an_answer_with_nothing_crossing_it_is_taken(daemon: PushDaemon) -> None:
    await daemon.store.set_flag(Flag.READ, False, who="operator")
    await daemon._poll_flags("poll")  # the operator's switch, its notice lost
    assert not daemon.read_on and not daemon.gate.open
