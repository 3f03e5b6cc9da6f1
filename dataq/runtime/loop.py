"""The event loop the daemons run on: uvloop when it is installed (the default install has it), asyncio's own
otherwise.

uvloop (libuv under a C implementation of asyncio's loop) is a well-kept drop-in: the daemons use only asyncio's
public API, so either loop runs them unchanged. A daemon's every record crosses the loop several times (the
feeder's socket, Redis's, the reply), and uvloop makes each crossing cheaper. One-shot commands (``dataq-cli``)
keep asyncio's loop: they cross it a handful of times, and importing uvloop would cost more than it saves.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None (asyncio's default loop) when uvloop is not installed."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_daemon(main: Coroutine[Any, Any, T]) -> T:
    """Run a daemon's main coroutine to its end on :func:`loop_factory`'s loop, as ``asyncio.run`` would."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
