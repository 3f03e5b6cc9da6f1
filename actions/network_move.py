"""``network_move``: send each record's file to another host with rsync, verify it there, optionally hand the
record on to the next site's dataq, then optionally remove the source.

Options (``[queues.NAME.network_move]``):

``destination`` (required)
    Directory the files go to: ``rsync://[user@]host[:port]/module[/path]`` (an rsync daemon),
    ``[user@]host:path`` (rsync over SSH; ``extra_args = ["-e", "ssh -i KEY"]`` to choose how), or an absolute
    local path (a mounted filesystem).
``layout`` (default ``"{name}"``)
    Path of the file beneath ``destination``; the placeholders of ``disk_store``'s layout.
``create_dirs`` (default true)
    Create ``destination``'s missing directories (``--mkpath``: rsync 3.2.3 or later on both ends; turn it off
    for an older rsync and a destination that exists). Layout directories beneath it are always created.
``rsync`` (default ``"rsync"``), ``extra_args`` (default none)
    The rsync program and arguments added to every call (``--bwlimit=...``, ``--password-file=...``).
``algorithm`` (default: the queue's ``checksum``)
    Older settings' name of the records' checksum algorithm; leave it out (``[queues.NAME] checksum`` says it).
``verify`` (default true)
    Verify the file at the destination after the transfer (see below).
``reread`` (default false)
    With ``verify``, also have the destination read back each file this transfer sent (below).
``remove_source`` (default false)
    ``true``: delete the source once the file is verified at the destination and, with ``next_sites``, handed
    on. ``"after_receipt"`` (needs ``next_sites``): delete it only once the next site's receipt says the end of
    the chain holds the file (:mod:`dataq.custody`; ``docs/custody.md``).
``io_timeout`` (default 60)
    Seconds rsync may see no data before it gives up (its ``--timeout`` and, for a daemon, ``--contimeout``).
``timeout`` (default: the queue's ``action_timeout``)
    Seconds one record may take in all, waiting for its batch included; a transfer whose records have all
    given up is killed.
``next_sites`` (default none), ``next_path``, ``handon_timeout`` (default 10)
    ``host:port`` of the next site's dataq push daemons. After a verified transfer the record, with its path
    there (``next_path``: an absolute template with the layout's placeholders and ``{relpath}``, the file's
    path beneath ``destination``), is pushed to the first that answers within ``handon_timeout`` seconds; its
    ``Pushed`` or ``Ignored`` reply makes the hand-on good, an ``Error:`` reply fails the record with that
    message. A site that cannot be reached or does not answer in time is skipped for the next one (and, for a
    while, by the hand-ons after: :mod:`dataq.nextsite.pool`). Hand-ons travel on one kept connection per next
    site, many at a time, with the custody's receipts queries (:mod:`dataq.nextsite`).
``handon_spool`` (default none)
    An absolute directory: the hand-on keeps the record in this spool (the store-and-forward feeder's, SQLite,
    fsynced) and succeeds at once; a sender of the pop daemon sends the spool to ``next_sites`` for as long as
    they stay away (fail-over in order, back to the first after a minute), so an outage of the next site holds
    up nothing here. A record the next site refuses stays in the spool, logged and listed by ``dataq feed
    --spool DIR --status``. One pop daemon per spool directory (a second one fails to start, naming the first).
``handon_tls_ca``, ``handon_tls_cert``, ``handon_tls_key`` (default none)
    TLS to the next sites' push daemons: a CA to verify them (none: the system's CAs, once TLS is on through
    ``handon_tls_ca`` or ``handon_tls_cert``) and a client certificate and key for mutual TLS.
``custody`` (default true), ``receipt_interval`` (default 10), ``resend_after`` (default 3600),
``receipt_alarm`` (default 86400), ``custody_max`` (default 100,000)
    With ``next_sites`` (and ``custody``), every record handed on stays in this site's custody until the next
    site answers ``done`` for it (end to end). Each is asked about every ``receipt_interval`` seconds, over the
    hand-on's connection type and TLS; one the next site does not know ``resend_after`` seconds after its hand-on
    is sent again (a next site that cannot be reached is an outage: nothing is resent to it); records waiting
    for their receipt longer than ``receipt_alarm`` seconds make a notice to the operators. At ``custody_max``
    records in custody, hand-ons wait (an outage of the custody, not a failure) until receipts make room.

``batch_size`` (default 100), ``max_batch_size`` (default 1,000), ``batch_bytes`` (default 64 MiB),
``batch_age`` (default 0)
    Records are moved in batches (:class:`~dataq.actions.batcher.BatchOptions`): one rsync sends a batch's
    files and one verifies them, so a small file costs a share of two rsync processes instead of two of its
    own. Batches start at ``batch_size`` records and grow, up to ``max_batch_size``, while each rsync call
    spends most of its time on its own round trips and set-up (a long link:
    :mod:`~dataq.actions.transfer_tuner`, which logs each step with its reason and shows its state under
    ``batch_tuning`` in ``dataq-cli --workers --json``); to an rsync daemon whose greeting says the link is far
    (:mod:`~dataq.actions.round_trip`) they start at ``max_batch_size``. ``max_batch_size`` at or below
    ``batch_size`` keeps them at ``batch_size``. Four batches are sent at once, and the pop daemon runs at least
    four batches of the size in use at once (whatever ``[pop] concurrency`` says; each as many records as
    ``batch_bytes`` holds by the records' mean size, 100 at most before it is known), and the next batch, which
    gathers while they are sent, so batches fill with the defaults; large files, cut into batches of 64 MiB, go
    side by side. A daemon whose ``max connections`` takes fewer gets fewer (:mod:`~dataq.actions.connections`): a
    call it refuses while another of the action's is open waits for that one instead of counting as an outage.

What is verified: before sending, the source's size and checksum must match the record (a bad source is never sent,
so it cannot overwrite a good copy); that read is the only one dataq makes of the source, and records of a batch
are read in parallel while the previous batch is sent. A record whose feeder sent its file's identity, a file that
still has it, needs no read (``[queues.NAME] source_check``, :attr:`dataq.record.Record.identity`). The transfer
skips a file the destination holds with the same size and time (a retry sends nothing), and rsync writes under a
temporary name that it renames when complete. With ``verify``, a file counts as at the destination when:

* rsync transferred it and its source is still the file dataq read (same device, inode, size, modification and
  change time): rsync's receiver checks the whole-file checksum of what it wrote against the sender's of what
  it read, so the destination holds the bytes dataq checked against the record;
* or rsync did not transfer it (it was there already), and a dry-run fetch of such files from the destination
  (:func:`.rsync.remote_digests`: the far side reads each file and reports its digest; nothing is read on this
  side) reports the record's checksum: rsync reports md5 and xxh128 itself; for records of another algorithm
  (sha256) it reports md5, and the source's md5 is computed in the same read as the record's checksum.
  A file that does not verify is sent once more with ``--ignore-times`` (the destination may hold other data
  of the same size and time) and checked again.

``reread`` has the fetch read back the files rsync sent as well: one more read of each file at the destination,
for a destination whose storage may not keep what it was given. Without ``verify`` every file is sent
(``--ignore-times``; rsync's delta transfer makes that cheap for a file already there), and files are checked
at the destination only when rsync reports that some failed, to tell which.

One record's failure is its own: a bad source, a file that does not verify, a file rsync could not write. An
rsync that cannot reach the destination fails every record of its batch as an outage of the destination.

A record whose source is gone (this action removed it, then the daemon died before the record was
acknowledged) succeeds if the destination holds its data: the fetch reports the md5 of the file there, which
must be the record's (md5 and xxh128 records only; others fail as a missing source).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Mapping, Sequence

from dataq.bandwidth import Bandwidth
from dataq.checksum import LARGE_FILE_BYTES
from dataq.errors import ActionError, Retryable
from dataq.logs import get_logger
from dataq.ops.documents import TUNING_KEY
from dataq.record import Record

from .base import Action, ActionContext
from .batcher import MicroBatcher, RecordSizes
from .connections import Connections
from .files import SourceMismatch, SourceRead, in_thread, read_source_sync, remove_source_sync
from .handon import HandOn
from .layout import record_values, render
from .move_batch import BatchMove, Move
from .move_custody import SenderCustody
from .move_options import NetworkMoveOptions
from .round_trip import greeting_seconds
from .rsync import (
    Completed,
    destination_kind,
    join,
    make_work_dir,
    remote_algorithm,
    remove_stale_work_dirs,
)
from .transfer_tuner import TransferTuner

NO_DELAY = "--sockopts=TCP_NODELAY"
READ_BATCH = 16
"""Small sources read per trip to a reading thread (a read that hangs, on a stale mount, holds up its batch)."""
CLOSE_GRACE = 30.0
"""Seconds :meth:`NetworkMoveAction.close` lets running batches finish before it kills their rsync (their
records were not acknowledged and run again)."""

log = get_logger()


class NetworkMoveAction(Action[NetworkMoveOptions]):
    """Transfer records' files with rsync a batch at a time, verify them, hand them on (see the module docstring)."""

    name = "network_move"
    Options = NetworkMoveOptions

    def __init__(self, options: NetworkMoveOptions, context: ActionContext) -> None:
        super().__init__(options, context)
        self._batcher = options.batcher(self._move_batch, lambda move: move.record.size)
        # As many sources read at once as there are CPUs: more would only share them, so that every file is
        # read late instead of the first ones early, and the first batch would wait for all of them. Large files
        # have readers of their own, so that small ones never wait behind them; small ones are read a batch per
        # trip to a thread (a trip costs as much as reading a file of 20 KB).
        cpus = os.cpu_count() or 1
        self._large_readers = asyncio.Semaphore(cpus)
        self._small_reads: MicroBatcher[Record, SourceRead | SourceMismatch] = MicroBatcher(
            self._read_sources, size=READ_BATCH, age=0.0, in_flight=cpus)
        self.remote = remote_algorithm(self.algorithm)
        """What the destination reports of a copy: the records' algorithm, or md5 when rsync lacks it."""
        self._handon = HandOn(options.next_sites, timeout=options.handon_timeout, spool=options.handon_spool,
                               tls=(options.handon_tls_ca, options.handon_tls_cert, options.handon_tls_key),
                               site=context.site, algorithm=self.algorithm)
        self._custody = SenderCustody(self._handon, context, options)
        self._bandwidth = Bandwidth.parse(options.bandwidth) if options.bandwidth is not None else None
        self._connections = Connections(options.destination, options.connections, limit=self._limit_now)
        self._sizes = RecordSizes()
        self._tuner = TransferTuner(options.destination, least=options.batch_size, most=options.max_batch_size,
                                    enabled=options.max_batch_size > options.batch_size,
                                    most_bytes=options.batch_bytes)

    async def start(self) -> None:
        # A missing rsync is a set-up mistake to report at start-up, not once per record.
        if shutil.which(self.options.rsync) is None:
            raise ActionError(f"network_move: rsync program {self.options.rsync!r} not found")
        # Before the first claim: over a far link the first batches are cut at the most (a destination used only
        # within windows is not greeted outside them).
        greeting = (await greeting_seconds(self.options.destination)
                    if self._tuner.enabled and self.windows.open_at(time.time()) else None)
        if self._tuner.greeted(greeting) is not None:
            self._batcher.size = self._tuner.batch_size
        await asyncio.to_thread(remove_stale_work_dirs)
        if self.options.next_sites:
            await self._handon.start()
            self._custody.start()

    async def close(self) -> None:
        await self._small_reads.close(CLOSE_GRACE)
        await self._batcher.close(CLOSE_GRACE)
        await self._custody.close(CLOSE_GRACE)
        await self._handon.close(CLOSE_GRACE)

    def destination(self, record: Record) -> str | None:
        return self.options.destination

    def where(self) -> str:
        return self.options.destination

    def reload(self, options: NetworkMoveOptions) -> None:
        super().reload(options)
        self._bandwidth = Bandwidth.parse(options.bandwidth) if options.bandwidth is not None else None
        self._connections.resize(options.connections)

    def _limit_now(self) -> int | None:
        """The bytes per second the transfers may take together now (None: no limit)."""
        return None if self._bandwidth is None else self._bandwidth.at(time.time())

    def status(self) -> Mapping[str, object]:
        tuning = {TUNING_KEY: {self.options.destination: self._tuner.status()}} if self._tuner.enabled else {}
        return {**self._custody.status(), **self._connections.status(), **tuning}

    def records_at_once(self) -> int:
        # Enough to fill every batch in flight at the size the tuner has chosen for the link, and the next one,
        # which gathers while they are sent: with only those in flight claimed, a batch that ends frees its places
        # a claim at a time, and the first claim is cut nearly alone (over a 75 ms link the last 684 of 5,000
        # records left in four calls of 84-320, each paying rsync's 1.2 s of round trips; with the next batch
        # gathered, in one).
        # Each batch in flight as full as its bytes let it be: files so large that a batch holds a few of them would
        # otherwise be claimed by the thousand and wait their turn, time running.
        size, per_record = self._tuner.batch_size, self._sizes.per_record
        return self.options.in_flight * self.options.held(size, per_record) + self.options.next_batch(size, per_record)

    def base_args(self) -> list[str]:
        options = self.options
        seconds = str(max(1, round(options.io_timeout)))
        args = [options.rsync, f"--timeout={seconds}"]
        if destination_kind(options.destination) == "daemon":
            # Without TCP_NODELAY the daemon protocol's small messages meet delayed acknowledgements: every call
            # then waits 40 ms two or three times (measured: 90-130 ms per call against 5 ms with it).
            args += [f"--contimeout={seconds}", NO_DELAY]
        return [*args, *options.extra_args]

    async def connect(self, argv: list[str], ids: Sequence[str] = ()) -> Completed:
        return await self._connections.run(argv, ids)

    async def run(self, record: Record) -> None:
        self._sizes.saw(record.size)
        options = self.options
        values = record_values(record)
        relative = render(options.layout, values)
        # Sources are read here, before batching, so that records hash in parallel while a batch is sent.
        try:
            source: SourceRead | None = await self._read(record)
        except SourceMismatch:
            if await asyncio.to_thread(os.path.lexists, record.path) or self.remote != self.algorithm:
                raise  # rsync cannot report this record's checksum
            source = None  # removed by an earlier run that then died: done if the destination holds the data
        error = await self._batcher.submit(Move(record, relative, source))
        if error is not None:
            raise error
        if options.next_sites:
            assert options.next_path is not None
            await self._custody.check_room()
            site = await self._handon(record, render(options.next_path, {**values, "relpath": relative},
                                                      absolute=True))
            # In custody before it is done here (and before its source may go): a crash in between runs the
            # record again, and the next site answers its hand-on Ignored.
            await self._custody.keep(record, site, source.identity if source is not None else None)
        removed = options.remove_source is True
        if removed:
            await asyncio.to_thread(remove_source_sync, record.path)
        log.debug("moved", id=record.id, target=join(options.destination, relative), verified=options.verify,
                  handed_on=bool(options.next_sites), source_removed=removed)

    async def _read(self, record: Record) -> SourceRead:
        """Check the record's source against it (SourceMismatch if it is not the record's data)."""
        if record.size >= LARGE_FILE_BYTES:
            async with self._large_readers:
                return await in_thread(lambda abort: read_source_sync(record, self.algorithm, abort, also=self.remote,
                                                                      trust_identity=self.trusts_identity))
        outcome = await self._small_reads.submit(record)
        if isinstance(outcome, SourceMismatch):
            raise outcome
        return outcome

    async def _read_sources(self, records: list[Record]) -> list[SourceRead | SourceMismatch]:
        def read_all(abort: threading.Event) -> list[SourceRead | SourceMismatch]:
            outcomes: list[SourceRead | SourceMismatch] = []
            for record in records:
                try:
                    outcomes.append(read_source_sync(record, self.algorithm, abort, also=self.remote,
                                                     trust_identity=self.trusts_identity))
                except SourceMismatch as exc:
                    outcomes.append(exc)
            return outcomes

        return await in_thread(read_all)

    async def _move_batch(self, moves: list[Move]) -> list[ActionError | None]:
        """Send, then verify, a batch: per record None (its file is at the destination) or what failed."""
        started = time.monotonic()
        outcomes = await self._move(moves)
        seconds = time.monotonic() - started
        unreachable = all(isinstance(outcome, Retryable) for outcome in outcomes)
        if self._tuner.observe(seconds, sum(move.record.size for move in moves), len(moves), failed=unreachable):
            self._batcher.size = self._tuner.batch_size
        # One line per batch: each record's own is at debug level (and its history in the queue's events).
        log.info("moved a batch", destination=self.options.destination, records=len(moves),
                 failed=sum(outcome is not None for outcome in outcomes),
                 bytes=sum(move.record.size for move in moves), seconds=round(seconds, 3))
        return outcomes

    async def _move(self, moves: list[Move]) -> list[ActionError | None]:
        outcomes: list[ActionError | None] = [None] * len(moves)
        targets: dict[str, Move] = {}
        for index, move in enumerate(moves):
            other = targets.setdefault(move.relative, move)
            if other.digest != move.digest:
                outcomes[index] = ActionError(f"{self.target(move)} is also the target of record "
                                              f"{other.record.id} of this batch")
        work = await asyncio.to_thread(make_work_dir)
        try:
            await BatchMove(self, moves, outcomes, work).run()
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)
        return outcomes

    def target(self, move: Move) -> str:
        return join(self.options.destination, move.relative)
