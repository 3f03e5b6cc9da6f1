"""The push daemon's gate: feeders are read only while nothing blocks it.

Several parts of the daemon may close it, each for its own reason (the ``read`` flag is off, Redis is
unavailable, the committer's backlog is full, the daemon is starting or stopping); it opens again once every
reason is gone. The listener watches it and pauses or resumes every connection's socket at once.
"""

from __future__ import annotations

from collections.abc import Callable

from dataq.logs import get_logger

BLOCK_READ_OFF = "read flag off"
BLOCK_REDIS = "redis unavailable"
BLOCK_BACKLOG = "committer backlog full"
BLOCK_STARTING = "flags not read yet"
BLOCK_STOPPING = "shutting down"

log = get_logger()


class Gate:
    """Open when no reason blocks it; it starts blocked by :data:`BLOCK_STARTING` (the flags are not read yet)."""

    def __init__(self) -> None:
        self._blocks: set[str] = {BLOCK_STARTING}
        self._watchers: list[Callable[[], None]] = []

    @property
    def open(self) -> bool:
        return not self._blocks

    @property
    def blocked_by(self) -> list[str]:
        return sorted(self._blocks)

    def blocks(self, reason: str) -> bool:
        return reason in self._blocks

    def watch(self, on_change: Callable[[], None]) -> None:
        """Call ``on_change`` whenever the gate opens or closes."""
        self._watchers.append(on_change)

    def block(self, reason: str, blocked: bool = True) -> None:
        """Close (or, with ``blocked=False``, stop closing) the gate for ``reason``."""
        was_open = self.open
        if blocked:
            self._blocks.add(reason)
        else:
            self._blocks.discard(reason)
        if was_open != self.open:
            log.info("reading feeders" if self.open else "not reading feeders", blocked_by=self.blocked_by)
            for on_change in self._watchers:
                on_change()
