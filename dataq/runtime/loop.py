"""The event loop the daemons run on: uvloop when it is installed (the default install has it), asyncio's own
otherwise.

uvloop (libuv under a C implementation of asyncio's loop) is a well-kept drop-in: the daemons use only asyncio's
public API, so either loop runs them unchanged. A daemon's every record crosses the loop several times (the
feeder's socket, Redis's, the reply), and uvloop makes each crossing cheaper. One-shot commands (``dataq-cli``)
keep asyncio's loop: they cross it a handful of times, and importing uvloop would cost more than it saves.

A daemon also tunes Python's cyclic garbage collector before it starts (:func:`tuned_collector`): what start-up made
(modules, settings, clients) is frozen out of its scans, and it looks at young objects after 20,000 allocations
instead of 700.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

YOUNG_COLLECTION_AFTER = 20_000
"""Container objects allocated (net of those freed) before the collector scans the young ones; Python's default is
700. A daemon makes a few tasks, futures and dicts per record, so at 700 it collected every few records, and each
older collection scanned every object start-up made. Measured on a watched burst of 1,000 files (interleaved
rounds of ``bench/lsyncd.py --only dataq``): the pop daemon's CPU seconds fell from 0.59-0.67 to 0.49-0.54, the
feeder's from 0.63-0.81 to 0.60-0.68. Cycles that become garbage still go within these many allocations."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None (asyncio's default loop) when uvloop is not installed."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


@contextlib.contextmanager
def tuned_collector() -> Iterator[None]:
    """Within: what exists on entry is frozen out of the collector's scans, and it looks at young objects less often
    (:data:`YOUNG_COLLECTION_AFTER`); on exit, as it was (a daemon run in a test's process leaves it so)."""
    threshold = gc.get_threshold()
    # Without a collection first: one of everything start-up made takes 40 ms, a feeder's whole start a fifth more;
    # the garbage start-up left in cycles, frozen with the rest, is small and made once.
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_AFTER, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def run_daemon(main: Coroutine[Any, Any, T]) -> T:
    """Run a daemon's main coroutine to its end on :func:`loop_factory`'s loop, as ``asyncio.run`` would, with the
    collector tuned for a long-running process (:func:`tuned_collector`)."""
    with tuned_collector(), asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
