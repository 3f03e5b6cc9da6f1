"""The ``dataq feed`` command: records from a file or a directory scan, through a :class:`Feeder`, with a
progress line on a terminal and a one-line summary at the end; or, with a spool, through the spool
(:mod:`.spooled`); or a watched directory's files, for ever."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TextIO

from dataq.errors import DataqError
from dataq.feed.client import (
    CONNECT_TIMEOUT,
    DEFAULT_RETRY_FOR,
    FAILBACK_AFTER,
    Feeder,
    Target,
    client_tls_context,
)
from dataq.feed.sources import read_record_file, scan_tree
from dataq.protocol import Reply
from dataq.record import Record, RecordRules
from dataq.runtime.signals import install_stop_signals
from dataq.runtime.supervise import Supervisor
from dataq.runtime.systemd import ready, run_watchdog, stopping, watchdog_interval

if TYPE_CHECKING:
    from dataq.feed.metrics import FeedMetrics
    from dataq.feed.spooled import Link
    from dataq.feed.watch import WatchOptions

PROGRESS_INTERVAL = 0.25
"""Seconds between two redraws of the progress line."""


class _Progress:
    """One self-redrawing line on a terminal's stderr: records answered, rate, and the total once known."""

    def __init__(self, feeder: Feeder, stream: TextIO) -> None:
        self.feeder, self.stream = feeder, stream
        self.total: int | None = None
        self._started = time.perf_counter()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL)
            self.draw()

    def draw(self, end: str = "") -> None:
        result = self.feeder.result
        elapsed = time.perf_counter() - self._started
        done = result.total
        if self.total:
            width = 30
            filled = min(width, width * done // self.total)
            bar = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total}"
        else:
            bar = f"{done} records"
        rate = done / elapsed if elapsed > 0 else 0.0
        self.stream.write(f"\r{bar}  pushed {result.pushed}, ignored {result.ignored}, errors {result.errors}"
                          f"  {rate:,.0f}/s\x1b[K{end}")
        self.stream.flush()


async def feed_command(
    *,
    host: str,
    port: int,
    file: str | None,
    scan_dir: str | None,
    window: int,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    rules: RecordRules,
    activity: str | None = None,
    also: Sequence[Target] = (),
    retry_for: float = DEFAULT_RETRY_FOR,
    target_timeout: float = CONNECT_TIMEOUT,
    failback_after: float = FAILBACK_AFTER,
    spool: str | None = None,
) -> int:
    """Send FILE's records (or every file under ``scan_dir``), report refusals on stderr and a summary on stdout;
    the exit status is 1 if any record was refused (by the daemon, or as an invalid line before sending).

    With ``spool``, records are spooled before they are sent and the feed waits for the push daemons as long as
    it takes (``retry_for`` does not apply); refused records stay in the spool (``--status`` lists them)."""
    tls = client_tls_context(tls_ca, tls_cert, tls_key) if (tls_ca or tls_cert) else None
    origins: list[str] = []
    local_errors = 0
    err = sys.stderr

    def report(line: str) -> None:
        # On a terminal the progress line is wiped first, so the report does not land in its middle.
        err.write(("\r\x1b[K" if progress else "") + line + "\n")

    def on_reply(index: int, reply: Reply) -> None:
        if not reply.ok:
            report(f"{origins[index]}: {reply}")

    feeder = Feeder(host, port, also=also, window=window, tls=tls, retry_for=retry_for, timeout=target_timeout,
                    failback_after=failback_after, keep_replies=False, on_reply=on_reply)
    progress = _Progress(feeder, err) if err.isatty() and spool is None else None

    def on_listed(count: int) -> None:
        if progress is not None:
            progress.total = count

    if scan_dir is not None:
        source = scan_tree(scan_dir, rules, on_listed=on_listed)
    elif file is not None:
        if file != "-" and not await asyncio.to_thread(os.path.isfile, file):
            raise DataqError(f"cannot read {file}: no such file")
        source = read_record_file(file, rules)
    else:
        raise DataqError("give a FILE of record lines or a directory to scan")

    async def records() -> AsyncIterator[Record]:
        nonlocal local_errors
        async for origin, outcome in source:
            if isinstance(outcome, str):
                local_errors += 1
                report(f"{origin}: not sent: {outcome}")
                continue
            origins.append(origin)
            yield outcome if activity is None else replace(outcome, activity=activity)

    invalid = "; {local_errors} lines not sent (invalid)"
    if spool is not None:
        # Imported here, as below: a feed without a spool starts without sqlite, inotify and the watcher.
        from dataq.feed.spooled import Link, spool_and_forward

        stop = asyncio.Event()
        install_stop_signals(stop)
        link = Link(((host, port), *also), window=window, tls=tls, timeout=target_timeout,
                    failback_after=failback_after)
        try:
            spooled = await spool_and_forward(records(), spool, link, stop)
        except OSError as exc:
            raise DataqError(f"cannot read {file or scan_dir}: {exc.strerror or exc}") from exc
        print(spooled.summary() + (invalid.format(local_errors=local_errors) if local_errors else ""))
        return 0 if not spooled.counts["refused"] and not local_errors and not stop.is_set() else 1

    drawing = asyncio.create_task(progress.run()) if progress is not None else None
    try:
        result = await feeder.feed(records())
    except OSError as exc:
        raise DataqError(f"cannot read {file or scan_dir}: {exc.strerror or exc}") from exc
    finally:
        if drawing is not None:
            drawing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drawing
    if progress is not None:
        progress.draw(end="\n")
    print(result.summary() + (f"; {local_errors} lines not sent (invalid)" if local_errors else ""))
    return 0 if result.ok and not local_errors else 1


async def watch_command(options: WatchOptions, spool: str, link: Link, rules: RecordRules,
                        metrics_at: tuple[str, int] | None = None) -> int:
    """``dataq feed --watch``: feed the directory's complete files until SIGTERM or SIGINT; under systemd, ready
    once the spool is open and the directory watched, and pinging the watchdog while the event loop turns. Like the
    other daemons, an error of a part nothing awaits stops it (exit status 1), through a supervisor. With
    ``metrics_at`` (host, port), its metrics are served there."""
    metrics, server = None, None
    if metrics_at is not None:
        # Imported here: a one-shot feed serves no metrics, and starts faster without prometheus-client.
        from dataq.feed.metrics import FeedMetrics
        from dataq.ops.exposition import serve_metrics

        metrics = FeedMetrics(options.root, spool, link.names())
        server = await serve_metrics(metrics.registry, *metrics_at)
    try:
        return await _watch(options, spool, link, rules, metrics)
    finally:
        if server is not None:
            await asyncio.to_thread(server.close)


async def _watch(options: WatchOptions, spool: str, link: Link, rules: RecordRules,
                 metrics: FeedMetrics | None) -> int:
    """The watch itself, between the metrics endpoint's start and its end."""
    from dataq.feed.spooled import watch_and_forward

    stop = asyncio.Event()
    install_stop_signals(stop)
    supervisor = Supervisor(stop)
    interval = watchdog_interval()

    async def watchdog() -> None:  # also what installs the supervisor's handler of unhandled errors
        if interval is None:
            await stop.wait()
        else:
            await run_watchdog(interval, stop)

    supervisor.start("watchdog", watchdog)

    async def watching() -> None:
        await ready(f"watching {options.root}")

    try:
        status = await watch_and_forward(options, spool, link, stop, rules=rules, on_watching=watching,
                                         metrics=metrics)
    finally:
        await stopping()
        await supervisor.cancel()
    return 1 if supervisor.failed else status
