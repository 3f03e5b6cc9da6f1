"""``disk_store``: copy each record's file into a storage root, verified, laid out by a path template.

Options (``[queues.NAME.disk_store]``):

``root`` (required)
    Absolute path of an existing directory; nothing is ever written outside it.
``layout`` (default ``"{date}/{checksum2}/{checksum}"``)
    Where a file goes beneath ``root``. Placeholders: ``{checksum}``, ``{checksum2}`` (its first two
    characters), ``{date}`` (UTC ``YYYYMMDD`` the record was pushed), ``{name}`` (the source's base name) and
    ``{size}``; nothing else (no format specs, no attribute access). A layout whose result would leave the root
    (``..``, an absolute path) is refused at start-up if the template itself does it, and per record if a
    value does (a record's name of ``..``).
``algorithm`` (default: the queue's ``checksum``)
    Older settings' name of the records' checksum algorithm; leave it out (``[queues.NAME] checksum`` says it).
``verify`` (default true)
    Read the copy back from disk (after fsync, with its cached pages dropped) and check its size and checksum
    before publishing it. The source is always checked against its record while it is copied: hashed with the
    record's algorithm, unless its feeder sent the identity the file still has (``[queues.NAME] source_check``).
``remove_source`` (default false)
    Delete the source file once its stored copy is verified and durable.
``manifest`` (default true)
    Name every copy stored in the root's manifest of the day, under ``ROOT/.dataq/manifests/``, in lines any
    ``md5sum -c`` (``sha256sum -c``, ``xxh128sum -c``) checks from the root, durable before the record is done
    (:mod:`dataq.audit.manifest`); ``dataq audit --copies`` checks the copies against them. ``.dataq`` is dataq's:
    a layout that would store a copy there is refused.
``timeout`` (default: the queue's ``action_timeout``)
    Seconds one record may take, waiting for its batch included.
``batch_size`` (default 1,000), ``batch_bytes`` (default 1 GiB), ``batch_age`` (default 0)
    Records are stored in batches (:class:`~dataq.actions.batcher.BatchOptions`): the files of a batch are
    copied, then made durable with one sync of the filesystem, read back, published, and their names made
    durable with a second sync, so a batch costs two journal commits instead of two per file. One record's
    failure is its own. The pop daemon runs at least two batches' records at once (whatever ``[pop]
    concurrency`` says; each batch as many as ``batch_bytes`` holds by the records' mean size, 100 at most before
    it is known), so batches fill with the defaults.

A record whose file is already stored with the same data succeeds without a second copy (a retry, or a record
pushed again), so a crash anywhere is recovered by running the record again. With the default layout the date
is part of the path: the same data pushed again on another day is stored again under that day; use a layout
without ``{date}`` to keep exactly one copy per checksum.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from dataq.checksum import check_algorithm
from dataq.errors import ActionError
from dataq.logs import get_logger
from dataq.record import Record
from dataq.windows import check_windows

from .base import Action, ActionContext
from .batcher import BatchOptions, RecordSizes
from .files import in_thread
from .layout import check_layout, record_values, render
from .slots import Slots
from .storing import Stored, store_batch_sync

DEFAULT_LAYOUT = "{date}/{checksum2}/{checksum}"
"""One directory per day, then 256 fan-out directories by checksum prefix so none grows too large."""

CLOSE_GRACE = 30.0
"""Seconds :meth:`DiskStoreAction.close` lets running batches finish before it stops them (their records were
not acknowledged and run again)."""

log = get_logger()


@dataclass(frozen=True, slots=True)
class DiskStoreOptions(BatchOptions):
    root: str
    """Absolute path of the storage root (an existing directory)."""
    layout: str = DEFAULT_LAYOUT
    """Path template beneath ``root``, with the placeholders ``{checksum}``, ``{checksum2}`` (its first two
    characters), ``{date}`` (the UTC ``YYYYMMDD`` of the push), ``{name}`` (the source's base name), ``{size}``."""
    algorithm: str | None = None
    """The records' checksum algorithm (None: the queue's ``checksum``; older settings named it here)."""
    batch_size: int = field(default=1000, kw_only=True)
    """Records in a batch at most. A batch ends in two syncs of the filesystem whatever it holds, and gathers only
    while the batches before it are stored (a record that comes alone is stored at once): a cap of 100 cut a
    backlog into batches of 100, each paying the syncs (the archive of a cascade stored 1,000 records handed on
    together in ten of them, two at a time, 0.7 s past the last hand-on; in batches of up to 1,000, 0.4 s)."""
    verify: bool = True
    """Read the copy back and check it before publishing."""
    remove_source: bool = False
    """Delete the source once the stored copy is verified."""
    manifest: bool = True
    """Name each copy in the root's manifest (``ROOT/.dataq/manifests/``)."""
    timeout: float | None = None
    """Seconds one record may take (None: the queue's ``action_timeout``)."""
    windows: tuple[str, ...] = ()
    """Times of day the root is used, ``"HH:MM-HH:MM"`` in local time (none: always): :mod:`dataq.windows`."""
    max_connections: int | None = None
    """Batches stored beneath the root at once at most (None: one per batch in flight, four); the batches beyond
    wait their turn (a root on disks that must not take more)."""

    def __post_init__(self) -> None:
        check_windows(self.windows)
        self.at_once(self.max_connections)
        if not os.path.isabs(self.root):
            raise ValueError(f"root must be an absolute path, got {self.root!r}")
        check_layout(self.layout)
        if self.algorithm is not None:
            check_algorithm(self.algorithm)
        if self.timeout is not None and not 0 < self.timeout < float("inf"):
            raise ValueError(f"timeout must be a positive number of seconds, got {self.timeout}")
        self.check_batching()

    @property
    def stores_at_once(self) -> int:
        """Batches stored at once at most."""
        return self.at_once(self.max_connections)


class DiskStoreAction(Action[DiskStoreOptions]):
    """Store each record's file beneath ``root`` (see the module docstring)."""

    name = "disk_store"
    Options = DiskStoreOptions

    def __init__(self, options: DiskStoreOptions, context: ActionContext) -> None:
        super().__init__(options, context)
        self._batcher = options.batcher(self._store_batch, lambda item: item[0].size)
        self._slots = Slots(options.root, options.stores_at_once)
        self._sizes = RecordSizes()

    def records_at_once(self) -> int:
        # Each batch in flight as full as its bytes let it be: 2,000 large files, a few to a batch, would wait
        # their turn with their time limits running.
        return self.options.in_flight * self.options.held(self.options.batch_size, self._sizes.per_record)

    async def start(self) -> None:
        # A missing root is an operator's mistake to report at start-up, not once per record.
        if not await asyncio.to_thread(os.path.isdir, self.options.root):
            raise ActionError(f"disk_store root {self.options.root} is not a directory")

    def destination(self, record: Record) -> str | None:
        return self.options.root

    def where(self) -> str:
        return self.options.root

    async def run(self, record: Record) -> None:
        self._sizes.saw(record.size)
        options = self.options
        outcome = await self._batcher.submit((record, render(options.layout, record_values(record))))
        if isinstance(outcome, ActionError):
            raise outcome
        log.debug("stored" if outcome.copied else "already stored", id=record.id, path=outcome.path,
                  source_removed=options.remove_source)

    def reload(self, options: DiskStoreOptions) -> None:
        super().reload(options)
        self._slots.room = options.stores_at_once

    def status(self) -> Mapping[str, object]:
        return self._slots.status(self._slots.room)

    async def _store_batch(self, items: list[tuple[Record, str]]) -> list[Stored | ActionError]:
        await self._slots.enter([record.id for record, _ in items])
        try:
            return await self._store_now(items)
        finally:
            self._slots.leave()

    async def _store_now(self, items: list[tuple[Record, str]]) -> list[Stored | ActionError]:
        options = self.options
        started = time.monotonic()
        outcomes = await in_thread(lambda abort: store_batch_sync(
            items, options.root, algorithm=self.algorithm, verify=options.verify,
            remove_source=options.remove_source, abort=abort, trust_identity=self.trusts_identity,
            keep_manifest=options.manifest))
        # One line per batch: each record's own is at debug level (and its history in the queue's events).
        log.info("stored a batch", root=options.root, records=len(items),
                 copied=sum(isinstance(outcome, Stored) and outcome.copied for outcome in outcomes),
                 failed=sum(isinstance(outcome, ActionError) for outcome in outcomes),
                 bytes=sum(record.size for record, _ in items), seconds=round(time.monotonic() - started, 3))
        return outcomes

    async def close(self) -> None:
        await self._batcher.close(CLOSE_GRACE)
