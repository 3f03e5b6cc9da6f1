"""The hashing of the files an audit of directories looks at, begun as soon as the settings are read.

An audit of 100,000 small files on two cores must not leave a core idle: not while the process imports what asks the
chain and reaches Redis (half a second), nor while the directories are listed (as long again). So the files are
listed in a thread of their own, folder by folder, and each part is handed to the worker processes
(:class:`~dataq.audit.sources.HashPool`) as soon as it is listed; the audit reads the results later, in the order
the files were handed on.

How many files go to a worker at once adapts to what waits: a quarter of the files listed and not yet handed on
per free place (two per worker), at most :data:`CHUNK`. Many files waiting make large tasks (little to send
between processes per file); at the end of the listing the tasks shrink, so that a few large files are spread over
every core rather than queued behind one.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

from dataq.audit.sources import Hashed, HashPool, Result, listed, settled_before
from dataq.errors import DataqError
from dataq.feed.watch import WatchOptions

CHUNK = 1024
"""Files hashed per task at most: enough that sending the task and its answers between processes costs little."""
IN_FLIGHT_PER_WORKER = 2
"""Tasks handed on per worker before the first comes back: the next is there when one ends."""
SMALLEST_WHILE_LISTING = 64
"""Files at least in a task handed on while the listing goes on and the workers are busy (tiny tasks cost more to
send than to hash; the listing brings more within milliseconds)."""

Sent = tuple[list[str], "Future[list[Result]]"] | BaseException | None
"""A task handed on (its files, its results to come), an error of the listing, or the end (None)."""


class Hashing:
    """The files of ``directories`` (chosen as their feeders choose them) being listed and hashed with
    ``algorithm`` by ``pool``, those modified at ``newest_ns`` or before (default: settled now); read them with
    :meth:`groups`. Call :meth:`stop` (``groups`` does, when it ends) to end the listing early."""

    def __init__(self, pool: HashPool, directories: Sequence[WatchOptions], algorithm: str,
                 newest_ns: int | None = None) -> None:
        self.pool = pool
        self.directories = tuple(directories)
        self.algorithm = algorithm
        self.newest_ns = min(settled_before(options) for options in directories) if newest_ns is None else newest_ns
        self.listed = 0
        """Files listed so far."""
        self.unlisted: list[tuple[str, str]] = []
        """The folders that could not be listed, and why."""
        self._waiting: list[str] = []
        self._taken = 0
        """Files of ``_waiting`` handed on."""
        self._running = 0
        self._listed_all = False
        self._stopped = False
        # Reentrant: a task that ended before its callback was added calls it at once, in the thread that holds it.
        self._changed = threading.Condition(threading.RLock())
        self._sent: queue.SimpleQueue[Sent] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, args=(list(directories),), name="audit-listing",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    async def groups(self, group: int, *, first: int | None = None,
                     tick: Callable[[int], None] | None = None) -> AsyncIterator[list[Hashed]]:
        """Each file hashed, in the order listed, ``group`` files at a time (the first time ``first``), each
        group as soon as it is: the caller asks about a group while the next hash. ``tick`` is called per file
        looked at, with its size (0: not one to audit)."""
        wanted = group if first is None else first
        ready: list[Hashed] = []
        try:
            while True:
                try:
                    sent = self._sent.get_nowait()
                except queue.Empty:
                    if ready:  # the files hashed so far are asked about while the listing catches up
                        yield ready
                        ready, wanted = [], group
                    sent = await asyncio.to_thread(self._sent.get)
                if sent is None:
                    break
                if isinstance(sent, BaseException):
                    raise sent
                paths, future = sent
                try:
                    results = await asyncio.wrap_future(future)
                except BrokenProcessPool as exc:
                    raise DataqError(f"a hashing process of the audit died (killed, or out of memory): {exc}") \
                        from None
                for path, result in zip(paths, results, strict=True):
                    if result is None:
                        if tick is not None:
                            tick(0)  # not one to audit: counted as looked at, for the progress line's total
                        continue
                    ready.append(Hashed(path, *result))
                    if tick is not None:
                        tick(result[1])
                if len(ready) >= wanted:
                    yield ready
                    ready, wanted = [], group
            if ready:
                yield ready
        finally:
            self.stop()

    def _run(self, directories: list[WatchOptions]) -> None:
        """The listing thread: lists, and hands the files on as places free up."""
        try:
            for options in directories:
                for part in listed(options, self.unlisted):
                    with self._changed:
                        if self._stopped:
                            return
                        self._waiting += part
                        self.listed += len(part)
                        self._hand_on()
            with self._changed:
                self._listed_all = True
                while not self._stopped and self._taken < len(self._waiting):
                    self._hand_on()
                    if self._taken < len(self._waiting):
                        self._changed.wait()
        except BaseException as exc:  # raised where the audit reads the results
            self._sent.put(exc)
        finally:
            self._sent.put(None)

    def _hand_on(self) -> None:
        """Hand files on while there are free places (with ``_changed`` held)."""
        places = self.pool.workers * IN_FLIGHT_PER_WORKER
        while self._running < places and not self._stopped:
            left = len(self._waiting) - self._taken
            if not left or (not self._listed_all and left < SMALLEST_WHILE_LISTING and self._running):
                break
            size = min(CHUNK, max(1, left // places))
            paths = self._waiting[self._taken:self._taken + size]
            self._taken += size
            future = self.pool.submit(paths, self.algorithm, self.newest_ns)
            self._running += 1
            self._sent.put((paths, future))
            future.add_done_callback(self._ended)
        if self._taken >= CHUNK * places:  # the paths handed on are kept by their tasks, not here
            del self._waiting[:self._taken]
            self._taken = 0

    def _ended(self, _: Future[list[Result]]) -> None:
        with self._changed:
            self._running -= 1
            self._changed.notify_all()
