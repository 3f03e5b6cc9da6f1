"""What a pop daemon tells systemd's watchdog: alive while its claim loop turns or waits for work, and while its
actions respect their time limits; not while an action runs on past its limit (its slot is lost for good)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import pytest

from dataq.actions import Action, NoOptions
from dataq.config import QueueSettings
from dataq.ops.notices import LogNotifier
from dataq.pop import worker as worker_module
from dataq.pop.worker import PopWorker
from dataq.record import Record
from dataq.runtime.supervise import cancel_and_wait
from dataq.store import QueueStore
from testbed.actions import action_context, fake_store
from tests.helpers import make_records

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


@dataclass
class Running:
    """A worker of concurrency 1, registered as its pop daemon would have it, its claim loop and outcome writer
    running."""

    worker: PopWorker
    claiming: asyncio.Task[None]
    writing: asyncio.Task[None]

    async def started(self, action: Stubborn) -> None:
        """Wait for ``action`` to run; if it does not, say what the claim loop is doing (a CI run once hung here
        with nothing left to wake the test)."""
        try:
            async with asyncio.timeout(10):
                await action.running.wait()
        except TimeoutError:
            claiming = self.claiming
            ended = claiming.done() and (claiming.cancelled() or claiming.exception())
            raise AssertionError(f"the action never started: claim loop ended={claiming.done()} ({ended!r}), "
                                 f"free slots={self.worker.free_slots()}, "
                                 f"postponing={self.worker.outcomes.postponing}") from None

    async def stop(self) -> None:
        """As the pop daemon stops its parts: the outcome writer is cancelled until it ends (a single cancel can be lost
        in a Redis call, :func:`~dataq.runtime.supervise.cancel_and_wait`; the hang CI saw twice)."""
        self.worker.stop_claiming()
        await asyncio.wait_for(self.claiming, 10)
        await self.worker.finish(0)
        await cancel_and_wait([self.writing])
        assert self.writing.done()


async def registered_worker(store: QueueStore, queue: QueueSettings, actions: list[Action[Any]]) -> PopWorker:
    async def register() -> None:
        await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)

    await register()
    return PopWorker(store, WORKER, queue, actions, 1, LogNotifier(), register)


async def running(store: QueueStore, queue: QueueSettings, actions: list[Action[Any]]) -> Running:
    worker = await registered_worker(store, queue, actions)
    return Running(worker, asyncio.create_task(worker.claim_loop()), asyncio.create_task(worker.outcomes.run()))


async def test_an_action_running_past_its_limit_makes_the_worker_unresponsive_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "STALL_AFTER", 0.3)
    monkeypatch.setattr(worker_module, "CANCEL_WAIT", 0.3)
    store = fake_store()
    queue = QueueSettings("transfer", action_timeout=0.3)
    action = Stubborn(queue)
    await store.push_batch(make_records(1), source="t")
    run = await running(store, queue, [action])
    worker = run.worker
    try:
        await run.started(action)
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
        await run.stop()


async def test_an_idle_worker_stays_responsive_however_long_it_waits_for_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A limit of 50 ms, not less: a loaded machine (the suite's Spark tests beside it) may hold any loop that long.
    monkeypatch.setattr(worker_module, "STALL_AFTER", 0.05)
    monkeypatch.setattr(worker_module, "POLL_INTERVAL", 60.0)
    run = await running(fake_store(), QueueSettings("transfer"), [])
    try:
        await asyncio.sleep(0.5)  # ten stall limits, in the waits for a notice and for results that never come
        assert run.worker.responsive()
    finally:
        await run.stop()


async def test_a_worker_not_claiming_yet_or_stopped_on_purpose_has_no_loop_to_judge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "STALL_AFTER", 0.0)
    worker = await registered_worker(fake_store(), QueueSettings("transfer"), [])
    await asyncio.sleep(0.01)
    assert worker.responsive()  # still waiting for Redis to register: that is no stall
    worker.stop_claiming()
    await worker.claim_loop()
    await asyncio.sleep(0.01)
    assert worker.responsive()  # stopped on purpose: systemd was told STOPPING=1
