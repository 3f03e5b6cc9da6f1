"""The options of ``network_move`` (documented in :mod:`dataq.actions.network_move`), checked at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar

from dataq.bandwidth import check_bandwidth
from dataq.checksum import check_algorithm
from dataq.windows import check_windows

from .batcher import BatchOptions
from .handon import parse_site
from .layout import LAYOUT_FIELDS, check_layout
from .rsync import destination_kind

DEFAULT_LAYOUT = "{name}"
DEFAULT_IO_TIMEOUT = 60.0
DEFAULT_HANDON_TIMEOUT = 10.0
AFTER_RECEIPT = "after_receipt"
"""``remove_source``'s third value: delete the source once the next site's receipt says the chain holds it."""
DEFAULT_RESEND_AFTER = 3600.0
DEFAULT_CUSTODY_MAX = 100_000
"""Records in custody at most by default: about 70 MB of Redis (0.7 KB each, measured by bench/cascade.py)."""
DEFAULT_RECEIPT_INTERVAL = 10.0
DEFAULT_MAX_BATCH_SIZE = 1000
"""Records a batch grows to at most over a long link: four calls of 1,000 files of 20 KB keep a 400 Mbit/s link
with 150 ms round trips about half busy (its fixed cost, seven round trips, is then a third of each call)."""
DEFAULT_RECEIPT_ALARM = 86_400.0
NEXT_PATH_FIELDS = LAYOUT_FIELDS | {"relpath"}


@dataclass(frozen=True, slots=True)
class NetworkMoveOptions(BatchOptions):
    in_flight: ClassVar[int] = 4
    """An rsync call waits on the far side (its daemon's acknowledgements, its file creation) more than it uses
    the CPUs: with four batches at once a scan of 1,000 small files was moved 15 % sooner and a burst 7 %
    (``bench/move.py --whole``, ``bench/lsyncd.py``, two A/B pairs), where ``disk_store``, whose batches end in
    syncs of the whole filesystem, was 12 % slower at four and keeps two."""
    # kw_only as in the base class: a positional field with a default could not come before ``destination``.
    batch_bytes: int = field(default=64 << 20, kw_only=True)
    """Bytes of files at which a batch is cut (the file that reaches them included): bounds the work a timeout or
    a kill throws away. Lower than ``disk_store``'s 1 GiB: large files that came while a batch was being sent
    gathered, under 1 GiB, into one batch (the batcher's patience), a single rsync stream for all of them; a batch
    that reaches 64 MiB leaves at once, and the batches go side by side. Ten files of 30 MB scanned into a queue
    went as batches of 2 and 8 at 1 GiB, of 2, 3, 3 and 2 at 64 MiB, and took 0.67-0.77 s (four runs) instead of
    0.84-0.85 s (two), alternating (``bench/move.py --whole --checksum xxh128``; this VM's runs vary by 20-30 %).
    A batch of small files (100 of them) stays whole up to 640 KiB each."""
    destination: str
    """Where files go: ``rsync://host[:port]/module/path``, ``[user@]host:path`` or an absolute path."""
    layout: str = DEFAULT_LAYOUT
    """The file's path beneath ``destination``."""
    create_dirs: bool = True
    """Create ``destination`` if missing (``--mkpath``: rsync 3.2.3 or later on both ends)."""
    rsync: str = "rsync"
    """The rsync program."""
    extra_args: tuple[str, ...] = ()
    """Arguments added to every rsync call."""
    algorithm: str | None = None
    """The records' checksum algorithm (None: the queue's ``checksum``; older settings named it here)."""
    verify: bool = True
    """Verify the file at the destination after the transfer."""
    reread: bool = False
    """Also have the destination read back each file rsync sent (rsync checks what it wrote against what it
    sent; this reads it again from the destination's disk)."""
    remove_source: bool | str = False
    """Delete the source once the file is verified (and handed on); ``"after_receipt"``: once the end of the
    chain holds it, as the next site's receipt says."""
    io_timeout: float = DEFAULT_IO_TIMEOUT
    """Seconds without data before rsync gives up."""
    timeout: float | None = None
    """Seconds one record may take (None: the queue's ``action_timeout``)."""
    next_sites: tuple[str, ...] = ()
    """``host:port`` push daemons of the next site, tried in order."""
    next_path: str | None = None
    """The record's path at the next site: an absolute template (needed with ``next_sites``)."""
    handon_timeout: float = DEFAULT_HANDON_TIMEOUT
    """Seconds a next site has to answer before the next one is tried."""
    handon_spool: str | None = None
    """Spool directory: hand-ons are kept there and sent by a sender that never gives up (None: sent at once)."""
    handon_tls_ca: str | None = None
    """CA file to verify the next sites' push daemons with (set it or ``handon_tls_cert`` for TLS)."""
    handon_tls_cert: str | None = None
    """Client certificate for mutual TLS with the next sites."""
    handon_tls_key: str | None = None
    """Key of ``handon_tls_cert``."""
    custody: bool = True
    """With ``next_sites``: keep each record handed on in custody until the end of the chain confirms it (false:
    the hand-on ends this site's part, as before receipts existed)."""
    custody_max: int = DEFAULT_CUSTODY_MAX
    """Records in custody at most: at that many, hand-ons wait (as for an outage) until receipts make room."""
    resend_after: float = DEFAULT_RESEND_AFTER
    """Seconds after its hand-on a record the next site does not know is sent again."""
    receipt_interval: float = DEFAULT_RECEIPT_INTERVAL
    """Seconds between two questions to the next site about one record in custody."""
    receipt_alarm: float = DEFAULT_RECEIPT_ALARM
    """Seconds a record may wait for its receipt before operators are told."""
    windows: tuple[str, ...] = ()
    """Times of day the destination is used, ``"HH:MM-HH:MM"`` in local time (none: always):
    :mod:`dataq.windows`."""
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    """Records a batch may grow to when the link's round trips take most of each rsync call
    (:mod:`~dataq.actions.transfer_tuner`); batches start at ``batch_size`` (at ``max_batch_size`` when the
    destination's rsync daemon greets from afar: :mod:`~dataq.actions.round_trip`) and never shrink below it (at
    or below ``batch_size``: batches keep that size)."""
    max_connections: int | None = None
    """rsync connections to the destination at once at most (None: one per batch in flight, four); the batches
    beyond wait their turn."""
    bandwidth: str | None = None
    """The most the transfers to the destination take together, per second: a rate (``"10M"``) or a timetable in
    rclone's form (``"08:00,512K 19:00,10M 23:00,off"``), shared by the rsync calls opened at once (None: no limit):
    :mod:`dataq.bandwidth`."""

    def __post_init__(self) -> None:
        check_windows(self.windows)
        check_bandwidth(self.bandwidth)
        self.at_once(self.max_connections)
        destination_kind(self.destination)
        check_layout(self.layout)
        if self.algorithm is not None:
            check_algorithm(self.algorithm)
        if isinstance(self.remove_source, str) and self.remove_source != AFTER_RECEIPT:
            raise ValueError(f"remove_source must be true, false or {AFTER_RECEIPT!r}, got {self.remove_source!r}")
        if self.after_receipt and not self.next_sites:
            raise ValueError(f"remove_source = {AFTER_RECEIPT!r} needs next_sites: the receipts come from there")
        if self.custody_max < 1:
            raise ValueError(f"custody_max must be at least 1, got {self.custody_max}")
        if self.after_receipt and not self.custody:
            raise ValueError(f"remove_source = {AFTER_RECEIPT!r} needs custody: the receipts are asked for it")
        for name in ("io_timeout", "handon_timeout", "timeout", "resend_after", "receipt_interval", "receipt_alarm"):
            value = getattr(self, name)
            if value is not None and not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        for site in self.next_sites:
            parse_site(site)
        if self.next_sites and self.next_path is None:
            raise ValueError("next_sites needs next_path: the record's path at the next site")
        if self.next_path is not None:
            check_layout(self.next_path, NEXT_PATH_FIELDS, absolute=True)
        handon = ("handon_spool", "handon_tls_ca", "handon_tls_cert", "handon_tls_key")
        if not self.next_sites and (given := [name for name in handon if getattr(self, name) is not None]):
            raise ValueError(f"{given[0]} goes with next_sites")
        if self.handon_spool is not None and not os.path.isabs(self.handon_spool):
            raise ValueError(f"handon_spool must be an absolute directory, got {self.handon_spool!r}")
        if (self.handon_tls_cert is None) != (self.handon_tls_key is None):
            raise ValueError("handon_tls_cert and handon_tls_key go together")
        self.check_batching()
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {self.max_batch_size}")

    @property
    def after_receipt(self) -> bool:
        return self.remove_source == AFTER_RECEIPT

    @property
    def connections(self) -> int:
        """rsync connections to the destination at once at most."""
        return self.at_once(self.max_connections)

    @property
    def handon_tls(self) -> bool:
        return self.handon_tls_ca is not None or self.handon_tls_cert is not None


