"""Running a queue's actions on one record: order, success, and what each kind of failure says."""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import pytest
from structlog.testing import capture_logs

from dataq.actions import Action, NoOptions
from dataq.config import QueueSettings
from dataq.errors import ActionError, Permanent, Retryable
from dataq.pop.deadlines import Deadlines
from dataq.pop.failure import Failure
from dataq.pop.worker import run_actions
from dataq.record import Record
from testbed.actions import action_context
from tests.helpers import make_records

RECORD = make_records(1)[0]


async def failure_of(actions: list[Action[Any]]) -> Failure | None:
    return await run_actions(actions, RECORD, Deadlines())


async def run_on_record(actions: list[Action[Any]]) -> str | None:
    """What failed (the record's last error), or None."""
    failure = await failure_of(actions)
    return None if failure is None else failure.message


class Scripted(Action[NoOptions]):
    """Does what the test says: record its call, then return a value, raise, or hang."""

    def __init__(self, name: str, behaviour: Any = None, calls: list[str] | None = None, timeout: float = 5.0,
                 reaches: str | None = None) -> None:
        super().__init__(NoOptions(), action_context(QueueSettings("transfer", action_timeout=timeout)))
        self.label, self.behaviour, self.calls = name, behaviour, calls if calls is not None else []
        self.reaches = reaches

    def destination(self, record: Record) -> str | None:
        return self.reaches

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.label

    async def run(self, record: Record) -> None:
        self.calls.append(self.label)
        if self.behaviour == "hang":
            await asyncio.sleep(60)
        if isinstance(self.behaviour, BaseException):
            raise self.behaviour
        return self.behaviour  # type: ignore[no-any-return]


async def test_all_actions_run_in_order_and_success_is_none() -> None:
    calls: list[str] = []
    assert await run_on_record([Scripted("a", calls=calls), Scripted("b", 0, calls)]) is None
    assert calls == ["a", "b"]


async def test_the_first_failure_stops_the_record_and_names_the_action() -> None:
    calls: list[str] = []
    actions = [Scripted("copy", calls=calls), Scripted("move", ActionError("host down"), calls),
               Scripted("ingest", calls=calls)]
    assert await run_on_record(actions) == "move: host down"
    assert calls == ["copy", "move"]


async def test_a_timeout_says_which_action_and_how_long() -> None:
    assert await run_on_record([Scripted("slow", "hang", timeout=0.05)]) == "action slow timed out after 0.05s"


async def test_a_timeout_error_raised_by_the_action_itself_is_not_mistaken_for_its_timeout() -> None:
    message = await run_on_record([Scripted("net", TimeoutError("socket timed out"))])
    assert message == "net: TimeoutError: socket timed out"


async def test_an_unexpected_exception_is_a_failure_with_its_type_and_its_traceback_is_logged() -> None:
    with capture_logs() as logged:
        assert await run_on_record([Scripted("buggy", KeyError("path"))]) == "buggy: KeyError: 'path'"
        assert await run_on_record([Scripted("plain", ActionError("expected"))]) == "plain: expected"
    ((event),) = [entry for entry in logged if entry["log_level"] == "error"]
    assert event["event"] == "action raised an unexpected error" and event["action"] == "buggy"
    assert isinstance(event["exc_info"], KeyError)


@pytest.mark.parametrize(("result", "expected"), [(1, "status: returned 1"), ("bad", "status: returned 'bad'")])
async def test_a_non_zero_result_is_a_failure(result: object, expected: str) -> None:
    assert await run_on_record([Scripted("status", result)]) == expected


async def test_an_action_error_without_text_still_says_something() -> None:
    assert await run_on_record([Scripted("mute", ActionError())]) == "mute: ActionError"


# --- transient or permanent ----------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [
    Retryable("connection refused"), ConnectionRefusedError(111, "Connection refused"), ConnectionResetError(),
    TimeoutError("socket timed out"), OSError(errno.EHOSTUNREACH, "No route to host"),
    socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
])
async def test_an_unreachable_destination_is_a_transient_failure(error: Exception) -> None:
    failure = await failure_of([Scripted("send", error)])
    assert failure is not None and failure.transient


@pytest.mark.parametrize("error", [
    ActionError("checksum mismatch"), Permanent("refused path"), KeyError("path"), OSError(errno.EACCES, "denied"),
    socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
])
async def test_a_fault_of_the_record_or_a_bug_is_a_failure_that_counts(error: Exception) -> None:
    failure = await failure_of([Scripted("send", error)])
    assert failure is not None and not failure.transient


async def test_the_action_running_past_its_time_limit_counts_rather_than_waiting_for_ever() -> None:
    failure = await failure_of([Scripted("slow", "hang", timeout=0.05)])
    assert failure is not None and not failure.transient


async def test_the_unreachable_destination_is_the_errors_then_the_actions_then_its_name() -> None:
    named = await failure_of([Scripted("send", Retryable("down", destination="rsync://b/m"), reaches="rsync://a/m")])
    own = await failure_of([Scripted("send", Retryable("down"), reaches="rsync://a/m")])
    anonymous = await failure_of([Scripted("send", ConnectionRefusedError())])
    assert [f.destination if f else None for f in (named, own, anonymous)] == ["rsync://b/m", "rsync://a/m", "send"]


async def test_a_network_error_of_an_action_is_not_logged_as_a_bug() -> None:
    with capture_logs() as logged:
        await failure_of([Scripted("send", ConnectionRefusedError())])
    assert [entry for entry in logged if entry["log_level"] == "error"] == []
