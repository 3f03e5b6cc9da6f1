"""The plugin interface of actions: what a queue runs on each record, in the order its ``actions`` list says.

An action is a class with a ``name``, a frozen dataclass of typed ``Options`` (read from the queue's
``[queues.NAME.ACTION]`` table and checked at start-up), a ``timeout`` and an async :meth:`Action.run`. ``run``
returns when the record is done and raises :class:`~dataq.errors.ActionError` saying what failed otherwise; any
other exception counts as a failure too (and is logged with its traceback, as it is probably a bug).

Failures are of two kinds (:mod:`dataq.pop.failure`). :class:`~dataq.errors.Retryable` says the destination
cannot be reached now (connection refused, a timeout, a temporary refusal such as SMTP's 4xx): the record goes
back to the next-to-run end of the active list without counting a failure, and after a few in a row the pop
daemon marks that destination unreachable and sends one record at a time as a probe, with capped exponential
back-off, until one succeeds. :class:`~dataq.errors.Permanent` (or any other ActionError) says the record is at
fault (checksum or size mismatch, missing source, refused path): it counts toward ``max_errors``. An exception
that is not an ActionError is transient if it is the network's (ConnectionError, TimeoutError, OSError with
ECONNREFUSED, EHOSTUNREACH...), else it counts.

An action gets its options and an :class:`ActionContext`: the queue's settings, how many records its pop daemon
runs at once, leases (one writer at a time for work outside Redis, such as a catalog), the queue's custody set
(records handed on to another site), the site's name and the daemon's notifier. It has no other way to Redis,
and no settings of other sections.

Options fields may be ``str``, ``int``, ``float``, ``bool``, ``tuple[...]`` of those, or ``X | None``; a field
without a default is a required key. An options field named ``timeout`` (seconds, None = the queue's
``action_timeout``) lets one action have its own timeout. An action that can be configured inline in the
``actions`` list (``sleep:0.5``) names the option the inline argument sets in ``inline_option``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from dataq.config import QueueSettings
from dataq.ops.notices import Notifier
from dataq.record import Record
from dataq.store.facets import CustodyFacet
from dataq.windows import Windows

from .batcher import BatchOptions


class Leases(Protocol):
    """Named single-writer leases of the queue (the pop daemon's store provides them)."""

    def lease(self, name: str, *, ttl: float, wait: float) -> AbstractAsyncContextManager[None]:
        """Hold lease ``name`` inside the block; LeaseLost if not taken within ``wait`` s or found lost after."""
        ...


ALGORITHM_OPTIONS = ("algorithm", "checksum_algorithm")
"""The options by which ``network_move``, ``disk_store`` and ``archive_ingest`` named their records' checksum
algorithm before queues had ``checksum``; still honoured for a queue left at md5."""


def own_algorithm(options: object) -> str | None:
    """The checksum algorithm the options of one of dataq's actions name (None: the queue's; a site's action may
    have an option of that name for something else)."""
    if not type(options).__module__.startswith("dataq.actions."):
        return None
    for name in ALGORITHM_OPTIONS:
        if (own := getattr(options, name, None)) is not None:
            return str(own)
    return None


@dataclass(frozen=True, slots=True)
class NoOptions:
    """The options of an action that has none: any key in its table is an error."""


@dataclass(frozen=True, slots=True)
class ActionContext:
    """What an action may know of the daemon that runs it."""

    queue: QueueSettings
    concurrency: int
    """``[pop] concurrency`` (or ``dataq pop --concurrency``): records the pop daemon runs at once, unless an
    action's :meth:`Action.records_at_once` asks for more."""
    leases: Leases
    """The queue's leases (:meth:`dataq.store.QueueStore.lease`)."""
    custody: CustodyFacet | None = None
    """The queue's custody set, for an action that hands records on to another site (None: not kept)."""
    site: str = ""
    """This site's name (the setting ``site``)."""
    notifier: Notifier | None = None
    """Where the action's notices to operators go (None: the log)."""


OptionsT = TypeVar("OptionsT")
RELOADABLE = ("windows", "bandwidth", "max_connections")
"""The options a running pop daemon takes again on SIGHUP (:mod:`dataq.pop.reload`): the others at its next start."""


class Action(Generic[OptionsT]):
    """Base class of actions; ``start`` and ``close`` are no-ops unless an action needs them."""

    name: ClassVar[str] = ""
    """The name a queue's ``actions`` list uses: dataq's own are listed in :data:`dataq.actions.registry.BUILTIN`,
    a site's are the names of its entry points in the group ``dataq.actions``."""
    Options: ClassVar[type[Any]] = NoOptions
    """The frozen dataclass of this action's options."""
    inline_option: ClassVar[str | None] = None
    """The option that ``name:argument`` in the ``actions`` list sets (None: no inline argument)."""

    def __init__(self, options: OptionsT, context: ActionContext) -> None:
        self.options = options
        self.context = context

    @property
    def queue(self) -> QueueSettings:
        return self.context.queue

    @functools.cached_property
    def algorithm(self) -> str:
        """The algorithm of the records' checksums: the queue's ``checksum``, unless the action's own (older)
        ``algorithm`` option names another for a queue left at md5."""
        own = own_algorithm(self.options)
        return own if own is not None else self.queue.checksum

    @property
    def trusts_identity(self) -> bool:
        """Whether a record's file identity, sent by its feeder and still the file's, proves its checksum without
        a read (:func:`.files.read_source_sync`): the queue's ``source_check`` allows it, and the records' algorithm
        is the one its feeders compute (the queue's ``checksum``)."""
        return self.queue.source_check == "identity" and self.algorithm == self.queue.checksum

    @property
    def timeout(self) -> float:
        """Seconds one run may take: the option ``timeout`` if the action has one and it is set, else the queue's."""
        own = getattr(self.options, "timeout", None)
        return float(own) if own is not None else self.queue.action_timeout

    async def start(self) -> None:
        """Acquire what runs need (connections, a Spark session) before the first record is claimed."""

    async def close(self) -> None:
        """Release what :meth:`start` acquired; called once at shutdown, after the last run."""

    async def run(self, record: Record) -> None:
        """Act on one record: return when done, raise ActionError (with what failed) when not: Retryable when
        the destination cannot be reached now (the record waits, and its errors are not counted), Permanent or
        any other ActionError when the record itself is at fault (counted toward ``max_errors``)."""
        raise NotImplementedError

    def status(self) -> Mapping[str, object]:
        """What the action adds to its pop daemon's heartbeat (``dataq-cli`` shows it); JSON values only."""
        return {}

    def records_at_once(self) -> int:
        """Records this action needs running at once to work at full speed: an action that works a batch at a
        time needs enough to fill its batches in flight. The pop daemon runs at least that many, whatever
        ``[pop] concurrency`` says (0: no need of its own)."""
        return self.options.records_to_fill if isinstance(self.options, BatchOptions) else 0

    def destination(self, record: Record) -> str | None:
        """Where this action sends the record (a host, a mounted storage), shown when it is unreachable; None:
        the action's name stands for it. A Retryable that names its own destination wins."""
        return None

    def where(self) -> str:
        """Where this action sends records, as its windows name it (the action's name unless it says)."""
        return self.name

    @functools.cached_property
    def windows(self) -> Windows:
        """The times of day this action's destination is used: its option ``windows`` (none: always)."""
        return Windows.parse(getattr(self.options, "windows", ()))

    def reload(self, options: OptionsT) -> None:
        """Take ``options`` while running: they differ from the ones in use in :data:`RELOADABLE` keys only."""
        self.options = options
        self.__dict__.pop("windows", None)

    def __repr__(self) -> str:
        return f"<action {self.name} {self.options!r}>"
