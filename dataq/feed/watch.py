"""Watched directories: the paths of files once they are complete, as they arrive.

With inotify (through ``asyncinotify``), a file is complete when it is closed after writing (``IN_CLOSE_WRITE``)
or moved into the directory (``IN_MOVED_TO``): a file written slowly in place is taken once, when its writer
closes it. Network file systems show a client no inotify events of other hosts' writes; there ``poll`` lists the
tree every ``poll`` seconds and a file is complete once its size, time and inode were the same at two listings.

Files already there at start (written while no feeder ran) are found by a scan, which takes a file once it has
stayed unchanged for ``settle`` seconds: one still being written then is taken when its writer closes it. New
subdirectories are watched (with ``recursive``) and scanned the same way, since files may land in them before
their watch exists. When the kernel's event queue overflows, the whole tree is scanned again.

Names are chosen by globs: a glob with a ``/`` matches the path beneath the root, any other the file's name.
Hidden and temporary names (:data:`DEFAULT_EXCLUDES`) are skipped unless an ``include`` glob names them;
``exclude`` globs always win. Hidden directories are not entered.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import re
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from asyncinotify import Event, Inotify, Mask

from dataq.errors import DataqError
from dataq.logs import get_logger

DEFAULT_EXCLUDES = (".*", "*.tmp", "*.part", "*~")
"""Names of files still being written by their tools (editors, rsync's ``.name.XXXXXX``, downloads)."""
RETRY_UNREADABLE = 30.0
"""Seconds before a file this feeder could not read is looked at again (its writer may chmod it later)."""
DEFAULT_SETTLE = 2.0
"""Seconds a file found by a scan must stay unchanged before it is taken."""
FILE_EVENTS = Mask.CLOSE_WRITE | Mask.MOVED_TO
DIRECTORY_EVENTS = Mask.CREATE | Mask.MOVED_TO
ROOT_GONE = Mask.DELETE_SELF | Mask.MOVE_SELF
FILE_EVENTS_VALUE, IS_DIR_VALUE = FILE_EVENTS.value, Mask.ISDIR.value

log = get_logger()

Observed = tuple[int, int, int]
"""A file's size, mtime (ns) and inode: equal at two looks, the file did not change between them."""
ListedCallback = Callable[[Iterable[str]], Awaitable[None]]


class WatchError(DataqError):
    """The watched directory cannot be watched (missing, unreadable, removed while watched)."""


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """What to watch and how."""

    root: str
    recursive: bool = False
    include: tuple[str, ...] = ()
    """Globs a name must match (none: every name); they also take names the default excludes would skip."""
    exclude: tuple[str, ...] = ()
    poll: float | None = None
    """Seconds between listings, for file systems without inotify events; None: inotify."""
    settle: float = DEFAULT_SETTLE
    activity: str | None = None
    """The activity the files' records are fed in (None: the queue's globs decide)."""
    _chooser: _Chooser = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", os.path.abspath(self.root))
        object.__setattr__(self, "_chooser", _Chooser(self))
        if self.poll is not None and not self.poll > 0:
            raise ValueError(f"poll must be a positive number of seconds, got {self.poll}")
        if not self.settle >= 0:
            raise ValueError(f"settle must be zero or more seconds, got {self.settle}")

    def wanted(self, path: str) -> bool:
        """Whether the file at ``path`` (beneath the root) is to be fed."""
        prefix = self.root.rstrip("/") + "/"
        relative = path[len(prefix):] if path.startswith(prefix) else os.path.relpath(path, self.root)
        return self._chooser.wanted(relative, os.path.basename(path))

    def wanted_in(self, folder: str, name: str) -> bool:
        """:meth:`wanted` of the file ``name`` in ``folder``, a folder beneath the root given relative to it (``""``
        for the root itself, else ending in ``/``): a listing of 100,000 files names each once, not twice."""
        return self._chooser.wanted(folder + name, name)

    def enters(self, directory: str) -> bool:
        """Whether the directory at ``directory`` (beneath the root) is watched too."""
        return self.recursive and not os.path.basename(directory).startswith(".")


class _Chooser:
    """The globs of :class:`WatchOptions` compiled once into one pattern per kind (every event is asked)."""

    def __init__(self, options: WatchOptions) -> None:
        self.exclude = _Globs(options.exclude)
        self.include = _Globs(options.include) if options.include else _Globs(DEFAULT_EXCLUDES)
        self.included = bool(options.include)

    def wanted(self, relative: str, name: str) -> bool:
        if self.exclude.match(relative, name):
            return False
        return self.include.match(relative, name) == self.included


class _Globs:
    """Globs as two patterns: those with a ``/`` match the path beneath the root, the others the name."""

    def __init__(self, globs: Iterable[str]) -> None:
        by_path = [fnmatch.translate(glob) for glob in globs if "/" in glob]
        by_name = [fnmatch.translate(glob) for glob in globs if "/" not in glob]
        self.path = re.compile("|".join(by_path)) if by_path else None
        self.name = re.compile("|".join(by_name)) if by_name else None

    def match(self, relative: str, name: str) -> bool:
        return bool((self.name is not None and self.name.match(name))
                    or (self.path is not None and self.path.match(relative)))


def list_tree(options: WatchOptions, top: str | None = None) -> dict[str, Observed]:
    """Every wanted regular file under ``top`` (default: the root), with what a later look compares."""
    found: dict[str, Observed] = {}
    for directory, dirs, files in os.walk(top or options.root):
        dirs[:] = [name for name in dirs if options.enters(os.path.join(directory, name))]
        for name in files:
            path = os.path.join(directory, name)
            if not options.wanted(path):
                continue
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode):
                    found[path] = (info.st_size, info.st_mtime_ns, info.st_ino)
    return found


def _look(paths: Iterable[str]) -> dict[str, Observed]:
    looked: dict[str, Observed] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            looked[path] = (info.st_size, info.st_mtime_ns, info.st_ino)
    return looked


class Watcher:
    """Yields the paths of complete files under a directory, for ever (see the module's docstring).

    ``on_listed`` gets the full listing of the scan at start (the spool forgets the files no longer there);
    ``on_watching`` is awaited once the directory is watched: a file closed from then on is seen.
    A path may come more than once (a file closed twice, or closed while the start scan waits for it): the
    consumer recognises a version of a file it took already.
    """

    def __init__(self, options: WatchOptions, on_listed: ListedCallback | None = None,
                 on_watching: Callable[[], Awaitable[None]] | None = None) -> None:
        self.options = options
        self.on_listed, self.on_watching = on_listed, on_watching
        self._found: asyncio.Queue[str | BaseException] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()

    async def paths(self) -> AsyncIterator[str]:
        root = self.options.root
        if not await asyncio.to_thread(os.path.isdir, root):
            raise WatchError(f"cannot watch {root}: no such directory")
        if not await asyncio.to_thread(os.access, root, os.R_OK | os.X_OK):
            raise WatchError(f"cannot watch {root}: permission denied")
        if self.options.poll is not None:
            self._spawn(self._poll(self.options.poll))
        else:
            inotify = Inotify()
            try:
                await asyncio.to_thread(self._add_watches, inotify, root)
                watched_since = time.time_ns()
            except BaseException:
                inotify.close()
                raise
            self._spawn(self._events(inotify), closing=inotify)
            self._spawn(self._scan([root], watched_since, first=True))
        log.info("watching", directory=root, recursive=self.options.recursive,
                 mode="inotify" if self.options.poll is None else f"poll every {self.options.poll:g} s")
        try:
            if self.on_watching is not None:
                await self.on_watching()
            while True:
                found = await self._found.get()
                if isinstance(found, BaseException):
                    raise found
                yield found
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def retry_later(self, path: str, delay: float | None = None) -> None:
        """Yield ``path`` again in ``delay`` seconds (default :data:`RETRY_UNREADABLE`), if it is still there."""
        def again() -> None:
            if os.path.lexists(path):
                self._found.put_nowait(path)

        asyncio.get_running_loop().call_later(RETRY_UNREADABLE if delay is None else delay, again)

    def _spawn(self, job: Awaitable[None], closing: Inotify | None = None) -> None:
        async def guarded() -> None:
            try:
                await job
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # the consumer raises it (a watcher that stops must not go unseen)
                self._found.put_nowait(exc)
            finally:
                if closing is not None:
                    closing.close()

        task = asyncio.create_task(guarded(), name="watch")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _add_watches(self, inotify: Inotify, top: str) -> None:
        """Watch ``top`` and, with ``recursive``, every directory beneath it: each one is watched before it is
        listed, so a subdirectory made meanwhile is seen either way."""
        pending = [top]
        while pending:
            directory = pending.pop()
            mask = FILE_EVENTS | Mask.ONLYDIR
            if self.options.recursive:
                mask |= DIRECTORY_EVENTS | Mask.MOVED_FROM
            if directory == self.options.root:
                mask |= ROOT_GONE
            try:
                watch = inotify.add_watch(directory, mask)
                if str(watch.path) != directory:  # renamed while its events were lost: name it afresh
                    inotify.rm_watch(watch)
                    inotify.add_watch(directory, mask)
            except OSError as exc:
                if directory == self.options.root:
                    raise WatchError(f"cannot watch {directory}: {exc.strerror or exc}") from exc
                log.warning("cannot watch a subdirectory; its files are not fed", directory=directory,
                            error=exc.strerror or str(exc))
                continue
            if not self.options.recursive:
                return
            with contextlib.suppress(OSError), os.scandir(directory) as entries:
                pending += [entry.path for entry in entries
                            if entry.is_dir(follow_symlinks=False) and self.options.enters(entry.path)]

    @staticmethod
    def _forget_watches(inotify: Inotify, directory: str) -> None:
        """Stop watching ``directory`` and what is beneath it (moved away, or renamed: a watch follows its
        directory, and asyncinotify would go on naming the files it sees by the old path)."""
        for watch in inotify.watches:
            where = str(watch.path)
            if where == directory or where.startswith(directory + "/"):
                with contextlib.suppress(OSError):
                    inotify.rm_watch(watch)

    async def _events(self, inotify: Inotify) -> None:
        async for event in inotify:
            await self._event(inotify, event)

    async def _event(self, inotify: Inotify, event: Event) -> None:
        mask = event.mask.value  # an int: the flags' own operators build enum members, every event
        if mask & FILE_EVENTS_VALUE and not mask & IS_DIR_VALUE and event.name is not None and event.watch is not None:
            # The common event, a file closed or moved in, without Path arithmetic (event.path joins Paths).
            where = os.path.join(str(event.watch.path), str(event.name))
            if self.options.wanted(where):
                self._found.put_nowait(where)
            return
        path = event.path
        if mask & Mask.Q_OVERFLOW:
            log.warning("the kernel dropped file events (queue overflow); scanning the directory again",
                        directory=self.options.root)
            # Directories made during the burst have no watch yet.
            await asyncio.to_thread(self._add_watches, inotify, self.options.root)
            self._spawn(self._scan([self.options.root], time.time_ns()))
            return
        if mask & ROOT_GONE and event.watch is not None and str(event.watch.path) == self.options.root:
            raise WatchError(f"the watched directory {self.options.root} was removed or moved away")
        if path is None:
            return
        where = str(path)
        if mask & Mask.ISDIR:
            if mask & Mask.MOVED_FROM:
                self._forget_watches(inotify, where)
            elif mask & DIRECTORY_EVENTS and self.options.enters(where):
                await asyncio.to_thread(self._add_watches, inotify, where)
                self._spawn(self._scan([where], time.time_ns()))  # files may have landed before its watch existed
            return
        if mask & FILE_EVENTS and self.options.wanted(where):
            self._found.put_nowait(where)

    async def _scan(self, tops: list[str], watched_since: int, *, first: bool = False) -> None:
        """Take the files under ``tops`` that stay unchanged for ``settle`` seconds, except those written since
        every directory beneath ``tops`` was watched (``watched_since``, ns): their writers' closes are seen. (A
        time ahead of the clock was set by a copy that kept its source's: such a file is complete.) What is left
        to chance: a writer that paused for longer than ``settle`` as the watches were added (at the feeder's
        start, or as its directory was made), then goes on. "As" reaches a little past ``watched_since``: a file's
        time can read earlier than the clock did just before the write (the kernel stamps it from a coarser clock;
        a CI run saw a file begun after the watch listed as older). The doubt goes toward taking the file: one left
        out would wait for the next start, where one taken while still written fails its action's source check,
        and its writer's close brings it again."""
        listed: dict[str, Observed] = {}
        for top in tops:
            listed.update(await asyncio.to_thread(list_tree, self.options, top))
        if first and self.on_listed is not None:
            await self.on_listed(listed)
        if self.options.settle:
            await asyncio.sleep(self.options.settle)
            looked = await asyncio.to_thread(_look, listed)
        else:
            looked = listed
        looked_at = time.time_ns()
        for path, observed in listed.items():
            if looked.get(path) == observed and not watched_since <= observed[1] <= looked_at:
                self._found.put_nowait(path)

    async def _poll(self, interval: float) -> None:
        """List the tree every ``interval`` seconds; a file unchanged since the last listing is complete."""
        previous: dict[str, Observed] = {}
        taken: dict[str, Observed] = {}
        first = True
        while True:
            if not await asyncio.to_thread(os.path.isdir, self.options.root):
                raise WatchError(f"the watched directory {self.options.root} was removed or moved away")
            listed = await asyncio.to_thread(list_tree, self.options)
            if first and self.on_listed is not None:
                await self.on_listed(listed)
            first = False
            for path, observed in listed.items():
                if previous.get(path) == observed and taken.get(path) != observed:
                    taken[path] = observed
                    self._found.put_nowait(path)
            taken = {path: observed for path, observed in taken.items() if path in listed}
            previous = listed
            await asyncio.sleep(interval)


__all__ = ["DEFAULT_EXCLUDES", "WatchError", "WatchOptions", "Watcher", "list_tree"]
