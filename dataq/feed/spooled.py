"""Feeding through a spool: ``dataq feed --watch DIR`` and ``dataq feed --spool DIR FILE`` (or ``--scan``).

Both keep each record in the spool (:mod:`.spool`) before it is sent and send from the spool
(:mod:`.forward`), so a feeder killed at any moment, or a link down for hours, loses nothing. A watcher runs
until stopped; shutdown stops intake first, then gives what is in flight a grace period to be answered (the rest
stays spooled for the next start). A one-shot feed ends when every record it spooled is answered, however long
the push daemons stay away.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections import Counter
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataq.config.feed_settings import FeedSettings
from dataq.errors import SpoolError
from dataq.feed.client import CONNECT_TIMEOUT, DEFAULT_WINDOW, FAILBACK_AFTER, Target
from dataq.feed.forward import Forwarder, forward_until_stopped
from dataq.feed.intake import Intake
from dataq.feed.spool import Spool
from dataq.feed.spool_status import read_spool_status
from dataq.feed.watch import Watcher, WatchOptions
from dataq.logs import get_logger
from dataq.record import DEFAULT_RULES, Record, RecordRules
from dataq.runtime.systemd import path_instance

if TYPE_CHECKING:
    from dataq.feed.metrics import FeedMetrics

SHUTDOWN_GRACE = 10.0
"""Seconds a stopping feeder gives the records in flight to be answered."""

log = get_logger()


def spool_dir_for(feed: FeedSettings, directory: str, data_dir: str) -> str:
    """The spool directory of the feeder watching ``directory``: in ``[feed] spool`` (default ``<data_dir>/feed``),
    named as ``systemd-escape --path`` names the directory, like its unit (``dataq-feed@data-incoming``)."""
    return os.path.join(feed.spool or os.path.join(data_dir, "feed"), path_instance(directory))


@dataclass(frozen=True, slots=True)
class Link:
    """How a feeder reaches its push daemons."""

    targets: tuple[Target, ...]
    window: int = DEFAULT_WINDOW
    tls: ssl.SSLContext | None = None
    timeout: float = CONNECT_TIMEOUT
    failback_after: float = FAILBACK_AFTER

    def names(self) -> list[str]:
        """The push daemons as ``host:port``, in the order tried (as the link names the one it reaches)."""
        return [f"{host}:{port}" for host, port in self.targets]

    def forwarder(self, spool: Spool) -> Forwarder:
        return Forwarder(spool, self.targets, window=self.window, tls=self.tls, timeout=self.timeout,
                         failback_after=self.failback_after)


async def watch_and_forward(
    options: WatchOptions,
    spool_dir: str,
    link: Link,
    stop: asyncio.Event,
    *,
    rules: RecordRules = DEFAULT_RULES,
    grace: float = SHUTDOWN_GRACE,
    on_watching: Callable[[], Awaitable[None]] | None = None,
    metrics: FeedMetrics | None = None,
) -> int:
    """Feed the complete files under ``options.root`` until ``stop`` is set (or the watch fails); ``on_watching``
    is awaited once the spool is open and the directory watched (a file closed from then on is fed); ``metrics``
    are told of the forwarder, whose link and replies they export."""
    spool = await Spool(spool_dir).open()
    try:
        forwarder = link.forwarder(spool)
        if metrics is not None:
            metrics.link = forwarder

        async def listed(paths: Iterable[str]) -> None:
            try:
                forgotten = await spool.forget_files_except(options.root, paths)
            except SpoolError as exc:  # a full disk: the rows wait for the next start
                log.warning("cannot forget the files no longer in the watched directory", error=str(exc))
                return
            if forgotten:
                log.info("forgot files no longer in the watched directory", count=forgotten)

        watcher = Watcher(options, on_listed=listed, on_watching=on_watching)
        # A polled directory is on a network file system, whose reads may hang: never on the event loop.
        intake = Intake(spool, forwarder, rules, on_unreadable=watcher.retry_later, on_loop=options.poll is None,
                        activity=options.activity)
        log.info("feeding", directory=options.root, spool=spool.directory,
                 targets=link.names())
        ending = asyncio.Event()
        sending = asyncio.create_task(forward_until_stopped(forwarder, ending, grace), name="send")
        taking = asyncio.create_task(intake.take_files(watcher.paths()), name="take")
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({sending, taking, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Intake stops at once (whatever it had not spooled is found again by the scan at the next start),
            # the forwarder after its grace; both have ended before the spool closes, even if this is cancelled.
            stopping.cancel()
            taking.cancel()
            ending.set()
            took, sent = await asyncio.gather(taking, sending, return_exceptions=True)
        for outcome in (took, sent):  # a watch that failed (its directory removed), a damaged spool
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                raise outcome
        log.info("feeder stopped", taken=intake.taken, answered=forwarder.answered)
        return 0
    finally:
        await spool.close()


@dataclass(slots=True)
class SpooledResult:
    """What a one-shot spooled feed did."""

    counts: Counter[str]
    taken: int
    still_refused: int

    def summary(self) -> str:
        return (f"spooled {self.taken}; pushed {self.counts['pushed']}, ignored {self.counts['ignored']}, "
                f"refused {self.counts['refused']}"
                + (f"; {self.still_refused} refused records kept in the spool" if self.still_refused else ""))


async def spool_and_forward(
    records: AsyncIterable[Record],
    spool_dir: str,
    link: Link,
    stop: asyncio.Event,
    *,
    grace: float = SHUTDOWN_GRACE,
) -> SpooledResult:
    """Spool ``records``, then send until the spool holds nothing pending (records spooled by an earlier run
    included), or until ``stop``."""
    spool = await Spool(spool_dir).open()
    try:
        forwarder = link.forwarder(spool)
        intake = Intake(spool, forwarder)
        sending = asyncio.create_task(forward_until_stopped(forwarder, stop, grace), name="send")
        taking = asyncio.create_task(intake.take_records(records), name="take")
        try:
            await asyncio.wait({sending, taking}, return_when=asyncio.FIRST_COMPLETED)
            if taking.done():
                taking.result()
                forwarder.drain()
            await sending
        finally:
            for task in (taking, sending):
                if not task.done():
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        status = await asyncio.to_thread(read_spool_status, spool.directory)
        return SpooledResult(forwarder.counts, intake.taken, status.refused)
    finally:
        await spool.close()
