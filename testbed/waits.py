"""Waiting for a condition that something else brings about (tests only: production code waits on events)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

WAIT_TIMEOUT = 30.0
"""Seconds a test waits for what should happen well within it on a loaded machine."""
POLL = 0.02


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = WAIT_TIMEOUT, *,
                     what: str = "condition") -> None:
    """Poll ``check`` until it holds, or fail after ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(POLL)


async def eventually_equal(probe: Callable[[], Awaitable[object]], expected: object, timeout: float = WAIT_TIMEOUT,
                           *, what: str = "value") -> None:
    """Poll ``probe`` until it returns ``expected``; the failure says what it returned last."""
    last: list[object] = []

    async def matches() -> bool:
        last[:] = [await probe()]
        return last[0] == expected

    try:
        await eventually(matches, timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc} (expected {expected!r}, last got {last[0]!r})") from None
