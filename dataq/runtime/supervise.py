"""Supervised background tasks: every loop a daemon runs beside its main one is started, watched and cancelled here.

A loop that loses Redis (StoreUnavailable) is run again after a backoff: an outage is the normal life of a
daemon. So is a loop that dataq itself refused (any other DataqError: Redis out of memory or unable to write
its AOF, say): that is a condition of the world, logged as an error and retried, since restarting the daemon
would not change it. A loop that raises anything else has a bug, and a daemon running on without one of its
parts (a push daemon without its committer, with every feeder stalled) is worse than no daemon: the supervisor
logs the traceback and sets the daemon's stop event, the daemon shuts down as it would on SIGTERM and exits
non-zero (:attr:`Supervisor.failed`), and systemd (or ``dataq run``) starts it afresh. A loop that returns, or
is cancelled, before it was told to stop has stopped unexpectedly, and counts as failed too.

What runs outside the supervised loops (a task nobody awaits, a callback, a connection handler) fails out of
sight: asyncio only logs it, and the daemon would run on without that part, or hang on it. So a supervisor also
takes the event loop's unhandled errors (``loop.set_exception_handler``): one that is a bug stops the daemon the
same way. Only logged, as asyncio would: a lost connection (OSError), a condition dataq reported (DataqError), and
any error of one connection's protocol or transport, which asyncio has closed already: a feeder's line must never
be able to stop a daemon.

:class:`Pulse` is how a main loop proves to systemd's watchdog that it still turns (:mod:`dataq.runtime.systemd`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from dataq.errors import DataqError, StoreUnavailable
from dataq.logs import get_logger
from dataq.runtime.backoff import BACKOFF_CAP, Backoff

CANCEL_ATTEMPTS = 3
"""Times a background task is cancelled before it is given up on (a cancel can be lost: :func:`cancel_and_wait`)."""
CANCEL_WAIT = 0.5
"""Seconds to wait for background tasks after each cancel."""
EXIT_FAILED = 1
"""The exit status of a daemon one of whose parts failed (:attr:`Supervisor.failed`)."""
HEALTHY_RUN = BACKOFF_CAP * 2
"""Seconds a loop must have run before its next outage counts as a new incident (backoff starts over)."""

log = get_logger()

Body = Callable[[], Awaitable[None]]


class Supervisor:
    """The background tasks of one daemon (see the module docstring). ``stop`` is the daemon's stop event."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.failed: str | None = None
        """The name of the first task that failed of a bug (None while all are well)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._watched: asyncio.AbstractEventLoop | None = None

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._tasks)

    def start(self, name: str, body: Body, *, until: asyncio.Event | None = None) -> asyncio.Task[None]:
        """Run ``body`` as task ``name`` until ``until`` (default: the stop event) is set, or it is cancelled."""
        loop = asyncio.get_running_loop()
        if self._watched is not loop:
            self._watched = loop
            loop.set_exception_handler(self._unhandled)
        task = asyncio.create_task(self._run(name, body, until or self.stop), name=name)
        self._tasks.append(task)
        return task

    async def _run(self, name: str, body: Body, until: asyncio.Event) -> None:
        backoff = Backoff()
        while True:
            started = time.monotonic()
            try:
                await body()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise  # the daemon's own cancel
                # A cancellation nobody asked this task for (a library cancelling its own future) ends it all
                # the same: a part gone.
                self._fail(name, "was cancelled from within", None)
                return
            except StoreUnavailable as exc:
                log.warning("redis unavailable", loop=name, error=str(exc))
            except DataqError as exc:
                log.error("refused; retrying", loop=name, error=str(exc))
            except Exception as exc:
                self._fail(name, "raised an unexpected error", exc)
                return
            else:
                if not until.is_set():
                    self._fail(name, "ended before it was told to stop", None)
                return
            if until.is_set():
                return
            if time.monotonic() - started > HEALTHY_RUN:
                backoff.reset()  # it ran well for a while: this is a new incident, not the same one
            await backoff.wait(until)
            if until.is_set():
                return

    def _unhandled(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's exception handler: an error nothing awaited or caught (see the module docstring)."""
        error = context.get("exception")
        if (not isinstance(error, Exception) or isinstance(error, (OSError, DataqError)) or self.stop.is_set()
                or "protocol" in context or "transport" in context):
            loop.default_exception_handler(context)
            return
        source = context.get("task") or context.get("future")
        name = source.get_name() if isinstance(source, asyncio.Task) else str(context.get("message", "a callback"))
        self._fail(name, "failed outside the supervised tasks", error)

    def _fail(self, name: str, what: str, error: Exception | None) -> None:
        log.error(f"background task {what}; stopping the daemon", task=name, exc_info=error)
        if self.failed is None:
            self.failed = name
        self.stop.set()

    async def cancel(self) -> None:
        """Cancel every task and wait for them (see :func:`cancel_and_wait`)."""
        await cancel_and_wait(self._tasks)


async def every(interval: float, stop: asyncio.Event) -> AsyncIterator[float]:
    """Yield about every ``interval`` seconds until ``stop`` is set (at once first)."""
    while not stop.is_set():
        yield time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await stop.wait()


async def cancel_and_wait(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel the tasks and wait for them, cancelling again those that go on. A cancel can be lost: Python 3.11's
    ``asyncio.wait_for`` returns the result, and drops the cancel, when the cancel lands in the same turn of the loop
    as what it waits for ends (gh-86296, fixed in 3.12), and redis-py sends every command through it when a socket
    timeout is set, as dataq's clients always have. A task cancelled once in the middle of a Redis call may
    therefore run on, to wait for ever at its next idle point."""
    pending = {task for task in tasks if not task.done()}
    for _ in range(CANCEL_ATTEMPTS):
        if not pending:
            return
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=CANCEL_WAIT)
    if pending:
        log.warning("background tasks did not stop", tasks=sorted(task.get_name() for task in pending))


class Pulse:
    """When a main loop last turned, and whether it is waiting by choice (nothing to do) rather than stuck."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()
        self._resting = 0

    def beat(self) -> None:
        """The loop turned (took work, finished a step, or retried after a failure)."""
        self._last = self._clock()

    @contextlib.contextmanager
    def resting(self) -> Iterator[None]:
        """Inside, the loop waits because it has nothing to do: however long, that is no stall."""
        self._resting += 1
        try:
            yield
        finally:
            self._resting -= 1
            self.beat()

    def alive(self, within: float) -> bool:
        """The loop rests by choice, or turned within the last ``within`` seconds."""
        return self._resting > 0 or self._clock() - self._last <= within
