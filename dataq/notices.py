"""Operator notices: what a daemon tells a person about (records gone inactive), through a pluggable notifier.

A daemon posts notices to an :class:`Outbox`, which delivers them one at a time in the background, so a slow
or failing notifier (an SMTP server) never holds up the work; a failed delivery is logged, not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Protocol

from dataq.logs import get_logger

KIND_INACTIVE = "inactive"
"""Records moved to the inactive queue (too many failures, or a crash loop)."""
OUTBOX_LIMIT = 1000
"""Notices waiting for delivery; beyond this they are only logged (a storm must not eat memory)."""

log = get_logger()


class Notifier(Protocol):
    """Delivers a notice to an operator (the log, e-mail, ...)."""

    async def notify(self, kind: str, subject: str, details: Mapping[str, object]) -> None: ...


class LogNotifier:
    """The default notifier: a warning in the daemon's log."""

    async def notify(self, kind: str, subject: str, details: Mapping[str, object]) -> None:
        log.warning("notice", kind=kind, subject=subject, details=dict(details))


class Outbox:
    """A bounded queue of notices and the loop that hands them to a notifier."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier
        self._queue: asyncio.Queue[tuple[str, str, Mapping[str, object]]] = asyncio.Queue(OUTBOX_LIMIT)

    @property
    def waiting(self) -> int:
        """Notices posted and not yet handed to the notifier."""
        return self._queue.qsize()

    def post(self, kind: str, subject: str, details: Mapping[str, object]) -> None:
        try:
            self._queue.put_nowait((kind, subject, details))
        except asyncio.QueueFull:
            log.warning("notice dropped: too many waiting for delivery", kind=kind, subject=subject)

    async def deliver(self) -> None:
        """Deliver notices as they are posted, until cancelled."""
        while True:
            kind, subject, details = await self._queue.get()
            try:
                await self.notifier.notify(kind, subject, details)
            except Exception:
                log.exception("notifier failed; notice lost", kind=kind, subject=subject)
            finally:
                self._queue.task_done()

    async def flush(self, within: float) -> bool:
        """Wait up to ``within`` seconds for every posted notice to be delivered; True when all were."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._queue.join()
                return True
        return False
