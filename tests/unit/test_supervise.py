"""Supervised background tasks: an outage is waited out, a bug stops the daemon, and a loop proves it turns."""

from __future__ import annotations

import asyncio
import gc

import pytest
from structlog.testing import capture_logs

from dataq.errors import StoreError, StoreUnavailable
from dataq.runtime import supervise
from dataq.runtime.supervise import Pulse, Supervisor


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    real = supervise.Backoff
    monkeypatch.setattr(supervise, "Backoff", lambda: real(initial=0.001, cap=0.002))


async def test_a_loop_that_loses_redis_is_run_again_until_it_succeeds() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    attempts = 0

    async def flaky() -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise StoreUnavailable("Redis is unavailable: refused")
        stop.set()  # done: as a loop that ends because it was told to

    with capture_logs() as logs:
        await asyncio.wait_for(supervisor.start("flaky", flaky), 5)
    assert attempts == 3 and supervisor.failed is None
    assert [entry["event"] for entry in logs].count("redis unavailable") == 2


async def test_a_loop_that_redis_refuses_is_logged_as_an_error_and_run_again_not_taken_for_a_bug() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    attempts = 0

    async def refused() -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:  # as while Redis is out of memory, or its disk is full
            raise StoreError("Redis refused the operation: OOM command not allowed when used memory > 'maxmemory'")
        stop.set()

    with capture_logs() as logs:
        await asyncio.wait_for(supervisor.start("heartbeat", refused), 5)
    assert attempts == 3 and supervisor.failed is None
    assert [(e["event"], e["log_level"]) for e in logs].count(("refused; retrying", "error")) == 2


async def test_a_loop_cancelled_from_within_is_a_part_gone_and_stops_the_daemon() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)

    async def self_cancelling() -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.cancel()  # as a library might
        await future

    await asyncio.wait_for(supervisor.start("notices", self_cancelling), 5)
    assert supervisor.failed == "notices" and stop.is_set()


async def test_a_loop_that_raises_a_bug_stops_the_daemon_and_is_named() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    ran_again = False

    async def buggy() -> None:
        nonlocal ran_again
        if stop.is_set():
            ran_again = True
        raise KeyError("a bug")

    with capture_logs() as logs:
        await asyncio.wait_for(supervisor.start("committer", buggy), 5)
    assert stop.is_set() and supervisor.failed == "committer" and not ran_again
    (failure,) = [entry for entry in logs if entry["log_level"] == "error"]
    assert failure["task"] == "committer" and isinstance(failure["exc_info"], KeyError)


async def test_a_loop_that_ends_before_it_is_told_to_is_a_failure_too() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)

    async def quits() -> None:
        return None

    await asyncio.wait_for(supervisor.start("reaper", quits), 5)
    assert supervisor.failed == "reaper" and stop.is_set()


async def test_the_first_failure_is_the_one_named_and_cancel_ends_the_rest() -> None:
    stop, halt = asyncio.Event(), asyncio.Event()
    supervisor = Supervisor(stop)

    async def forever() -> None:
        await asyncio.Event().wait()

    async def buggy() -> None:
        raise RuntimeError("first")

    supervisor.start("forever", forever, until=halt)
    await asyncio.wait_for(supervisor.start("first", buggy), 5)
    await asyncio.wait_for(supervisor.start("second", buggy), 5)
    assert supervisor.failed == "first"
    await supervisor.cancel()
    assert all(task.done() for task in supervisor.tasks)


async def test_a_task_whose_cancel_is_lost_in_a_redis_call_is_cancelled_again_until_it_ends() -> None:
    """Python 3.11's wait_for drops a cancel that lands as what it waits for ends, and redis-py sends every command
    through it: cancelled once, a task may run on and idle for ever (the liveness test's hang in CI)."""
    stopping: list[asyncio.Task[None]] = []

    async def part() -> None:
        sent = asyncio.ensure_future(asyncio.sleep(0))
        # The daemon's shutdown begins as the send ends: its first cancel lands in wait_for's window.
        sent.add_done_callback(lambda _: stopping.append(asyncio.create_task(supervise.cancel_and_wait([task]))))
        await asyncio.wait_for(sent, 5)  # as redis-py sends a command, with a socket timeout
        await asyncio.Event().wait()  # idle until the next call

    task = asyncio.create_task(part())
    while not stopping:
        await asyncio.sleep(0)
    await stopping[0]
    assert task.cancelled()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_task_nobody_awaits_that_fails_of_a_bug_stops_the_daemon_too() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    supervisor.start("waiting", stop.wait)

    async def forgotten() -> None:
        raise RuntimeError("a bug out of sight")

    with capture_logs() as logs:
        task = asyncio.get_running_loop().create_task(forgotten(), name="forgotten")
        await asyncio.sleep(0)
        del task  # its error never retrieved: asyncio reports it when the task is freed
        gc.collect()
        await asyncio.wait_for(stop.wait(), 5)
    assert supervisor.failed == "forgotten"
    failure = next(entry for entry in logs if entry["log_level"] == "error")
    assert failure["event"] == "background task failed outside the supervised tasks; stopping the daemon"
    assert str(failure["exc_info"]) == "a bug out of sight"


async def test_a_callback_that_fails_of_a_bug_stops_the_daemon() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    supervisor.start("waiting", stop.wait)

    def callback() -> None:
        raise KeyError("missing")

    asyncio.get_running_loop().call_soon(callback)
    await asyncio.wait_for(stop.wait(), 5)
    assert supervisor.failed is not None and "callback" in supervisor.failed.lower()


@pytest.mark.parametrize(("error", "where"), [
    (ConnectionResetError("peer went away"), {}),
    (StoreUnavailable("Redis is down"), {}),
    (ValueError("a bug in one connection's protocol: asyncio closed that connection"), {"protocol": object()}),
    (ValueError("the same, reported with the transport"), {"transport": object()}),
])
async def test_a_lost_connection_an_outage_or_one_connections_error_out_of_sight_is_only_logged(
    error: Exception, where: dict[str, object]
) -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    supervisor.start("waiting", stop.wait)
    asyncio.get_running_loop().call_exception_handler(
        {"message": "Fatal error on transport", "exception": error, **where})
    await asyncio.sleep(0.01)
    assert not stop.is_set() and supervisor.failed is None
    stop.set()


def test_a_pulse_is_alive_while_its_loop_turns_or_rests_and_stalled_otherwise() -> None:
    clock = Clock()
    pulse = Pulse(clock)
    clock.now = 30.0
    assert pulse.alive(within=60)
    clock.now = 61.0
    assert not pulse.alive(within=60)  # stuck in one step for over a minute
    pulse.beat()
    assert pulse.alive(within=60)
    with pulse.resting():
        clock.now = 10_000.0  # waiting for work, however long, is no stall
        assert pulse.alive(within=60)
    assert pulse.alive(within=60)  # leaving the rest counts as a turn
    clock.now = 10_061.0
    assert not pulse.alive(within=60)
