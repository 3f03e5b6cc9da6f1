"""What a pop daemon tells systemd's watchdog: alive while its claim loop turns or waits for work, and while its
actions respect their time limits; not while an action runs on past its limit (its slot is lost for good)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from dataq.actions import Action, NoOptions
from dataq.config import QueueSettings
from dataq.ops.notices import LogNotifier
from dataq.pop import worker as worker_module
from dataq.pop.worker import PopWorker
from dataq.record import Record
from dataq.store import QueueStore
from tests.helpers import action_context, fake_store, make_records

WORKER = "host:1:pop:abc"


class Stubborn(Action[NoOptions]):
    """Ignores the cancellation of its time limit until the test lets it go."""

    name = "stubborn"

    def __init__(self, queue: QueueSettings) -> None:
        super().__init__(NoOptions(), action_context(queue))
        self.running, self.release = asyncio.Event(), asyncio.Event()

    async def run(self, record: Record) -> None:
        self.running.set()
        while not self.release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await self.release.wait()


async def registered_worker(store: QueueStore, queue: QueueSettings, actions: list[Action[Any]]) -> PopWorker:
    """A worker of concurrency 1, registered in the store as its pop daemon would have it."""

    async def register() -> None:
        await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)

    await register()
    return PopWorker(store, WORKER, queue, actions, 1, LogNotifier(), register)


async def test_an_action_running_past_its_limit_makes_the_worker_unresponsive_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "STALL_AFTER", 0.05)
    monkeypatch.setattr(worker_module, "CANCEL_WAIT", 0.05)
    store = fake_store()
    queue = QueueSettings("transfer", action_timeout=0.05)
    action = Stubborn(queue)
    await store.push_batch(make_records(1), source="t")
    worker = await registered_worker(store, queue, [action])
    claiming = asyncio.create_task(worker.claim_loop())
    try:
        await action.running.wait()
        assert worker.responsive()  # within its limit, and the claim loop waits for a free slot
        async with asyncio.timeout(10):
            while worker.responsive():  # the limit passes, the cancellation is ignored, the grace runs out
                await asyncio.sleep(0.01)
        action.release.set()
        async with asyncio.timeout(10):
            while not worker.responsive():
                await asyncio.sleep(0.01)
    finally:
        action.release.set()
        worker.stop_claiming()
        await asyncio.wait_for(claiming, 10)
        await worker.finish(0)


async def test_an_idle_worker_stays_responsive_however_long_it_waits_for_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "STALL_AFTER", 0.01)
    monkeypatch.setattr(worker_module, "POLL_INTERVAL", 60.0)
    worker = await registered_worker(fake_store(), QueueSettings("transfer"), [])
    claiming = asyncio.create_task(worker.claim_loop())
    try:
        await asyncio.sleep(0.1)  # ten stall limits, in the wait for a notice that never comes
        assert worker.responsive()
    finally:
        worker.stop_claiming()
        await asyncio.wait_for(claiming, 10)
