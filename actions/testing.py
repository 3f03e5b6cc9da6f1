"""Actions for trying dataq out and for tests: ``echo``, ``noop``, ``fail``, ``sleep:<seconds>`` and ``mark``.

``mark`` leaves a file per run in a directory, so an operator (or a chaos run) can count how often each record
ran, across processes, restarts and crashes: :func:`marks` reads them back in the order the runs started.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True, slots=True)
class MarkOptions:
    dir: str
    """Absolute path of an existing directory; a file ``<monotonic ns>-<pid>-<record id>`` appears there per run."""
    seconds: float = 0.0
    """How long each run then takes."""

    def __post_init__(self) -> None:
        if not os.path.isabs(self.dir):
            raise ValueError(f"dir must be an absolute path, got {self.dir!r}")
        if not 0 <= self.seconds < float("inf"):
            raise ValueError(f"seconds must be a finite number >= 0, got {self.seconds}")


class MarkAction(Action[MarkOptions]):
    """Leave a file per run (see the module docstring), then sleep ``seconds``."""

    name = "mark"
    Options = MarkOptions

    async def start(self) -> None:
        if not await asyncio.to_thread(os.path.isdir, self.options.dir):
            raise ActionError(f"mark: {self.options.dir} is not a directory")

    async def run(self, record: Record) -> None:
        # In the event loop's thread: creating an empty file is quicker than a trip to a worker thread.
        leave_mark(self.options.dir, record)
        if self.options.seconds:
            await asyncio.sleep(self.options.seconds)


def leave_mark(directory: str, record: Record) -> None:
    """The file of one run of ``record``; the id is quoted, as a checksum pattern may allow a ``/`` in it."""
    Path(directory, f"{time.monotonic_ns():020d}-{os.getpid()}-{urllib.parse.quote(record.id, safe='')}").touch()


def marks(directory: str | os.PathLike[str]) -> list[str]:
    """The record ids of the runs marked in ``directory``, in the order the runs started (every process on one
    host shares the monotonic clock)."""
    return [urllib.parse.unquote(name.split("-", 2)[2]) for name in sorted(os.listdir(directory))]
