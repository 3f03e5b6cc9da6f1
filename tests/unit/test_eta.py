"""When a queue's backlog will be done: the time at the done rate of the last minutes, or why it cannot be said."""

from __future__ import annotations

import dataclasses
import time

import pytest

from dataq.ops.eta import NO_RATE, eta_of
from dataq.ops.health import Rates
from dataq.ops.holds import Hold
from dataq.store import Summary, Worker

BACKLOG = Summary("transfer", active=900, inactive=7, delayed=50, in_flight=50, tracked=1007, action=True, read=True,
                  workers=1, counters={})
POP = Worker("host:1:pop:a", {"role": "pop"}, {"running": 4, "at": time.time()})
PUSH = Worker("host:2:push:b", {"role": "push"}, {"at": time.time()})


def per_minute(done: float) -> Rates:
    return Rates({"pushed": 0.0, "done": done, "failed": 0.0}, 300.0, 300.0, True)


def test_the_backlog_of_active_delayed_and_in_flight_records_at_the_done_rate() -> None:
    eta = eta_of(BACKLOG, per_minute(500.0), [POP])
    assert (eta.backlog, eta.seconds, eta.unknown) == (1000, 120.0, None), "inactive records wait for an operator"
    assert eta.describe() == "2 min (1,000 records at 500.0 done per minute over the last 300 s)"
    assert eta.doc()["seconds"] == 120.0


def test_nothing_waiting_is_done_now_whatever_the_rate() -> None:
    empty = dataclasses.replace(BACKLOG, active=0, delayed=0, in_flight=0)
    eta = eta_of(empty, per_minute(0.0), [])
    assert (eta.seconds, eta.describe()) == (0.0, "nothing waits")


@pytest.mark.parametrize(("summary", "workers", "done", "code", "words"), [
    (dataclasses.replace(BACKLOG, action=False), [POP], 500.0, Hold.PAUSED, "actions are off"),
    (BACKLOG, [PUSH], 500.0, Hold.NO_WORKER, "no pop daemon"),
    (BACKLOG, [dataclasses.replace(POP, heartbeat=None)], 500.0, Hold.NO_WORKER, "no pop daemon"),
    (BACKLOG, [dataclasses.replace(POP, heartbeat={"unreachable": [
        {"destination": "rsync://valley/m", "since": 1_800_000_000.0, "error": "refused"}]})], 500.0,
     Hold.UNREACHABLE, "destination rsync://valley/m unreachable since"),
    (BACKLOG, [dataclasses.replace(POP, heartbeat={"outside_window": [
        {"destination": "/archive", "windows": "19:00-07:00", "opens": 1_800_000_000.0}]})], 500.0,
     Hold.OUTSIDE_WINDOW, "destination /archive outside its windows (19:00-07:00) until"),
    (BACKLOG, [POP], 0.0, NO_RATE, "nothing done in the last 300 s"),
])
def test_the_time_is_unknown_with_its_reason(summary: Summary, workers: list[Worker], done: float,
                                             code: str, words: str) -> None:
    eta = eta_of(summary, per_minute(done), workers)
    assert (eta.seconds, eta.unknown) == (None, code)
    assert words in eta.describe() and eta.describe().startswith("unknown: ")
    assert eta.doc()["unknown"] == code
