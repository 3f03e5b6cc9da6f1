"""An audit's progress on a terminal: files checked of all, files per second, and the time left."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

SHOW_EVERY = 0.5
"""Seconds between two updates of the line."""


class Progress:
    """One line on ``stream``, rewritten as files are checked; silent when ``enabled`` is false (not a terminal,
    or ``--json``). Thread-safe: the audit's threads tick it."""

    def __init__(self, label: str, total: int, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.label, self.total, self.enabled = label, total, enabled
        self.stream = sys.stderr if stream is None else stream
        self.done = 0
        self.bytes = 0
        self._started = time.monotonic()
        self._shown = 0.0
        self._lock = threading.Lock()

    def tick(self, size: int) -> None:
        with self._lock:
            self.done += 1
            self.bytes += size
            now = time.monotonic()
            if not self.enabled or now - self._shown < SHOW_EVERY:
                return
            self._shown = now
            self.stream.write("\r" + self.line(now))
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        elapsed = max(1e-9, (time.monotonic() if now is None else now) - self._started)
        rate = self.done / elapsed
        left = f"{(self.total - self.done) / rate:,.0f} s left" if rate > 0 and self.total >= self.done else "?"
        return (f"{self.label}: {self.done:,}/{self.total:,} files, {rate:,.0f} files/s, "
                f"{self.bytes / elapsed / 1e6:,.1f} MB/s, {left}")

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\r" + self.line() + "\n")
            self.stream.flush()
