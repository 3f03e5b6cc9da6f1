"""Actions for trying dataq out and for tests: ``echo``, ``noop``, ``fail`` and ``sleep:<seconds>``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from dataq.errors import ActionError
from dataq.logs import get_logger
from dataq.record import Record

from .base import Action, NoOptions

DEFAULT_FAIL_MESSAGE = "failed on purpose (the 'fail' test action)"
DEFAULT_SLEEP_SECONDS = 1.0

log = get_logger()


class EchoAction(Action[NoOptions]):
    """Log the record and succeed."""

    name = "echo"

    async def run(self, record: Record) -> None:
        log.info("echo", id=record.id, path=record.path, size=record.size)


class NoopAction(Action[NoOptions]):
    """Succeed without doing anything (benchmarks: only the queue's own cost is measured)."""

    name = "noop"

    async def run(self, record: Record) -> None:
        return None


@dataclass(frozen=True, slots=True)
class FailOptions:
    message: str = DEFAULT_FAIL_MESSAGE
    """What the failure says (it becomes the record's last error)."""


class FailAction(Action[FailOptions]):
    """Always fail."""

    name = "fail"
    Options = FailOptions
    inline_option = "message"

    async def run(self, record: Record) -> None:
        raise ActionError(self.options.message)


@dataclass(frozen=True, slots=True)
class SleepOptions:
    seconds: float = DEFAULT_SLEEP_SECONDS
    """How long each run takes."""
    timeout: float | None = None
    """This action's own timeout (None: the queue's ``action_timeout``)."""

    def __post_init__(self) -> None:
        if not 0 <= self.seconds < float("inf"):
            raise ValueError(f"seconds must be a finite number >= 0, got {self.seconds}")


class SleepAction(Action[SleepOptions]):
    """Sleep, then succeed: stands in for a slow transfer."""

    name = "sleep"
    Options = SleepOptions
    inline_option = "seconds"

    async def run(self, record: Record) -> None:
        await asyncio.sleep(self.options.seconds)
