"""Every Redis key and channel name dataq uses, built here and nowhere else.

All of a queue's keys carry the queue name as a hash tag, ``dq:{NAME}:...``, so they share one Redis Cluster
slot and every Lua script can touch them atomically. ``NAME`` is validated by the settings (letters, digits,
``_``, ``-``, ``.``), so it can never contain ``{`` or ``}``.

=====================  ======  ===========================================================  =================
key                    type    what it holds                                                owner / lifetime
=====================  ======  ===========================================================  =================
``records``            hash    id -> stored record (``record.encode_stored``); every id      push adds, ack /
                               tracked in active, inactive, delayed or a processing list.   delete / clear
                               Its field count is the number of records tracked.            removes
``active``             list    ids waiting to run: new on the left, next to run on the      push, claim,
                               right (the seed's ``activeq``).                              fail, range ops
``inactive``           list    ids that failed too often or were deactivated; newest on     fail, range ops
                               the left (the seed's ``inactiveq``).
``delayed``            zset    ids waiting out a retry delay, scored by due time (ms).     fail adds,
                                                                                            promote moves
                                                                                            them to active
``errors``             hash    id -> action failures so far (absent = 0).                   fail; removed on
                                                                                            ack/activate
``lasterror``          hash    id -> the last failure's message (a transient one too:       fail, postpone;
                               why a record waits for its destination).                     as errors
``crashes``            hash    id -> times its worker died while running it.                sweeper; as errors
``flags``              hash    ``action`` and ``read`` -> ``on``/``off`` (absent = on).     CLI, push daemon;
                                                                                            permanent
``counters``           hash    monotonic totals: pushed, duplicate, claimed, done, failed,  scripts; permanent
                               deactivated, waiting (records put back for an unreachable
                               destination), ... (for metrics and rates); replica_retries
                               (writes that re-confirm an unconfirmed one, min_replicas)
``rates``              hash    a ring of counts per 10-second bucket over the last hour      scripts
                               (``lua/lib/rates.lua``): ``t:<slot>`` the bucket a slot      (``count_rate``);
                               counts (server time // 10), ``<kind>:<slot>`` its count of    bounded: 360
                               pushed, duplicate, done or failed records, ``since`` the     slots, each
                               server time counting began. What --summary and the rate      reused after an
                               plots read, in one HMGET, instead of the event stream.       hour
``events``             stream  one entry per event: ``k`` kind, ``id``, ``d`` detail;        scripts; trimmed
                               a push writes one ``pushed`` entry per batch, its ids        by length and age
                               joined by newlines. Trimmed to a configured number of
                               entries and age.
``workers``            hash    worker id -> JSON (role, host, pid, started).                daemons register;
                                                                                            sweeper removes
``processing:<w>``     list    ids worker ``w`` has claimed and is running; newest left.    claim, ack, fail,
                                                                                            sweeper deletes
``heartbeat:<w>``      string  JSON stats of worker ``w``; expires after the heartbeat TTL: daemon, TTL
                               its absence means the worker is dead.
``lock:<name>``        string  a lease for single-writer work: redis-py's Lock (its token   holder, TTL
                               with a TTL the holder renews), e.g. the archive catalog's.
``done:<g>:<s>``       hash    remembered done records (:mod:`dataq.store.remembered`):     ack, receipts;
                               16-byte digest of the id -> ``<done ms>,<wait ms>[,<end     expire with their
                               ms>]``; ``g`` a generation of ``remember_done`` seconds,    generation + 1
                               ``s`` one of 65,536 shards (small hashes stay listpacks).
``custody``            hash    id -> JSON of a record handed on to the next site and not    network_move,
                               confirmed by the end of the chain yet (:mod:`.custody`).    custody steps
``custody_due``        zset    custody ids by when their next site is asked (ms).          as custody
``custody_since``      zset    custody ids by when they were first handed on (ms).         as custody
``custody_sites``      hash    next site -> records in custody there.                      as custody
``receipts``           list    ``<ms>,<end-to-end ms>`` of the newest receipts (capped).   custody steps
``lost``               hash    id -> ``<ms>,<why>``: records done here whose stored copy an  audit repair;
                               audit found missing or damaged (:mod:`.store.audits`).       clear
``audits``             hash    directory or storing root -> JSON of its last audit          dataq audit;
                               (when, counts per class, repairs).                           permanent
``active:<a>``         list    the ids of activity ``a`` waiting to run, as ``active`` holds   as ``active``
                               the ``default`` activity's (:mod:`dataq.activities`).
``activities``         set     the activities that ever had a list here: the pop daemon     push; permanent
                               adopts the lists of those it no longer serves.
``shares``             hash    activity -> its credit in the smooth weighted round robin    claim; clear
                               that shares claims between activities (``claim.lua``).
``rates:<a>``          hash    activity ``a``'s ring of done counts, as ``rates``.           ack; bounded
``names``              list    the records pushed lately, for the console's search          push; bounded:
                               (:mod:`dataq.store.names`): two elements per batch, its ids  renamed to
                               joined by newlines (nearer the head), then their stored      ``names_before``
                               values.                                                      when full
``names_count``        string  the records in ``names`` (reset when it is renamed).         push
``names_before``       list    the ``names`` before the last renaming (the older ones).     replaced whole
=====================  ======  ===========================================================  =================

Channel ``dq:{NAME}:notices`` (pub/sub) carries ``flag:<flag>:<on|off>`` when a flag changes, and channel
``dq:{NAME}:work`` carries ``work`` when records become runnable, so blocked daemons react at once instead of
polling. Two channels, because push daemons care only for flags and would otherwise hear every batch they write.
On a Redis Cluster both are shard channels (``SPUBLISH``/``SSUBSCRIBE``): they carry the hash tag too, so the
queue's master alone serves them (:mod:`dataq.store.cluster`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "dq"
QUEUE_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
WORKER_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
ACTIVITY_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,32}")
"""An activity's name: part of a key (``active:<name>``) and a word on the wire."""
DEFAULT_ACTIVITY = "default"
"""The activity of a record that names none and matches no activity's globs."""
DONE_SHARDS = 65_536
"""Shards per generation of the remembered done records: one per value of a digest's first two bytes."""


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The key names of one queue."""

    queue: str

    def __post_init__(self) -> None:
        if QUEUE_NAME_PATTERN.fullmatch(self.queue) is None:
            raise ValueError(f"invalid queue name {self.queue!r}")

    def _key(self, suffix: str) -> str:
        return f"{PREFIX}:{{{self.queue}}}:{suffix}"

    @property
    def records(self) -> str:
        return self._key("records")

    @property
    def active(self) -> str:
        return self._key("active")

    def active_of(self, activity: str) -> str:
        """The active list of one activity: the ``default`` activity's is ``active`` itself, so a queue without
        activities keeps its one list, and records queued before activities existed stay where they run."""
        if activity == DEFAULT_ACTIVITY:
            return self.active
        if ACTIVITY_PATTERN.fullmatch(activity) is None:
            raise ValueError(f"invalid activity name {activity!r}")
        return self._key(f"active:{activity}")

    def rates_of(self, activity: str) -> str:
        """The ring of one activity's done counts (the queue's own ring for ``default``'s is ``rates``)."""
        if ACTIVITY_PATTERN.fullmatch(activity) is None:
            raise ValueError(f"invalid activity name {activity!r}")
        return self._key(f"rates:{activity}")

    @property
    def activities(self) -> str:
        return self._key("activities")

    @property
    def shares(self) -> str:
        return self._key("shares")

    @property
    def inactive(self) -> str:
        return self._key("inactive")

    @property
    def delayed(self) -> str:
        return self._key("delayed")

    @property
    def errors(self) -> str:
        return self._key("errors")

    @property
    def lasterror(self) -> str:
        return self._key("lasterror")

    @property
    def crashes(self) -> str:
        return self._key("crashes")

    @property
    def flags(self) -> str:
        return self._key("flags")

    @property
    def counters(self) -> str:
        return self._key("counters")

    @property
    def rates(self) -> str:
        return self._key("rates")

    @property
    def events(self) -> str:
        return self._key("events")

    @property
    def workers(self) -> str:
        return self._key("workers")

    @property
    def notices(self) -> str:
        """Pub/sub channel of flag changes (not a key)."""
        return self._key("notices")

    @property
    def work(self) -> str:
        """Pub/sub channel of work notices (not a key)."""
        return self._key("work")

    @property
    def custody(self) -> str:
        return self._key("custody")

    @property
    def custody_due(self) -> str:
        return self._key("custody_due")

    @property
    def custody_since(self) -> str:
        return self._key("custody_since")

    @property
    def custody_sites(self) -> str:
        return self._key("custody_sites")

    @property
    def receipts(self) -> str:
        return self._key("receipts")

    @property
    def lost(self) -> str:
        return self._key("lost")

    @property
    def audits(self) -> str:
        return self._key("audits")

    @property
    def names(self) -> str:
        return self._key("names")

    @property
    def names_count(self) -> str:
        return self._key("names_count")

    @property
    def names_before(self) -> str:
        return self._key("names_before")

    def custody_keys(self) -> tuple[str, ...]:
        """The keys of the custody set, in the order the custody scripts take them."""
        return (self.custody, self.custody_due, self.custody_since, self.custody_sites)

    def done_prefix(self, generation: int) -> str:
        """The shards of one generation of the remembered done records: this, then the shard's number as 4 hex
        digits (``dq:{NAME}:done:<g>:<shard>``; :func:`dataq.store.remembered.lookup` names thousands at once)."""
        if generation < 0:
            raise ValueError(f"invalid generation {generation}")
        return self._key(f"done:{generation}:")

    def done_shards(self, generation: int) -> list[str]:
        """Every shard of one generation of the remembered done records, in order of their numbers."""
        prefix = self.done_prefix(generation)
        return [f"{prefix}{shard:04x}" for shard in range(DONE_SHARDS)]

    def processing(self, worker: str) -> str:
        return self._key(f"processing:{_checked_worker(worker)}")

    def heartbeat(self, worker: str) -> str:
        return self._key(f"heartbeat:{_checked_worker(worker)}")

    def lock(self, name: str) -> str:
        return self._key(f"lock:{_checked_worker(name)}")

    def data_keys(self) -> tuple[str, ...]:
        """The keys ``clear`` empties: the queue's records and their bookkeeping, not flags or workers."""
        return (
            self.records,
            self.active,
            self.inactive,
            self.delayed,
            self.errors,
            self.lasterror,
            self.crashes,
            self.lost,
            self.shares,
        )


def _checked_worker(worker: str) -> str:
    if WORKER_ID_PATTERN.fullmatch(worker) is None:
        raise ValueError(f"invalid worker id {worker!r}")
    return worker
