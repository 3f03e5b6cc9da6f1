"""The ``dataq feed`` command: records from a file or a directory scan, through a :class:`Feeder`, with a
progress line on a terminal and a one-line summary at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import TextIO

from dataq.errors import DataqError
from dataq.feed.client import Feeder, client_tls_context
from dataq.feed.sources import read_record_file, scan_tree
from dataq.protocol import Reply
from dataq.record import Record, RecordRules

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
) -> int:
    """Send FILE's records (or every file under ``scan_dir``), report refusals on stderr and a summary on stdout;
    the exit status is 1 if any record was refused (by the daemon, or as an invalid line before sending)."""
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

    feeder = Feeder(host, port, window=window, tls=tls, keep_replies=False, on_reply=on_reply)
    progress = _Progress(feeder, err) if err.isatty() else None

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
            yield outcome

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
