"""Claiming records and running the queue's actions on them, up to ``concurrency`` records at a time.

``concurrency`` is ``[pop] concurrency``, raised to what the queue's actions need to work at full speed
(:func:`running_at_once`): an action that works a batch at a time (``network_move``, ``disk_store``,
``archive_ingest``) gets enough records to fill its batches in flight with the default settings. Every record is
still claimed into this worker's processing list before it runs, so a kill loses nothing whatever the number.

The store's ``claim`` never blocks and is atomic with the ``action`` flag, so a record is never claimed while
action processing is off, however long a worker has been waiting. The waiting is done here: when there is
nothing to claim (or action is off) the worker sleeps until a pub/sub notice (``work``, ``flag:action:on``) or
:data:`POLL_INTERVAL`, whichever comes first. Each claim asks for as many records as there are free slots. A slot
is free again once its action ends, so the next claim travels while the finished records are being written (see
:mod:`dataq.pop.outcomes`): without that overlap the daemon and Redis take turns, each idle while the other works. At
most ``concurrency`` finished records wait for writing, though: an outage pauses claiming instead of piling up
results that cannot be written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from dataq.actions import Action
from dataq.config import PopSettings, QueueSettings
from dataq.errors import ActionError, ActionTimeout, Retryable, StoreUnavailable
from dataq.logs import get_logger
from dataq.ops.notices import Notifier
from dataq.pop.breaker import Breakers
from dataq.pop.deadlines import Deadlines
from dataq.pop.failure import Failure, is_transient
from dataq.pop.ledger import SlotLedger
from dataq.pop.outcomes import FailureObserver, OutcomeWriter
from dataq.pop.windowing import WindowGate
from dataq.record import Record
from dataq.runtime.backoff import HOT_RETRY_CAP, Backoff
from dataq.runtime.supervise import Pulse
from dataq.runtime.systemd import STALL_AFTER
from dataq.store import NOTICE_WORK, ClaimStatus, Flag
from dataq.store.facets import RecordPath

POLL_INTERVAL = 1.0
"""Seconds an idle worker waits for a notice before it tries to claim anyway (notices are lost while the
pub/sub connection is down, and a delayed retry falls due without one)."""
GATHER_DELAY = 0.001
"""Seconds the claim loop waits for more slots to free when only a few are."""
CANCEL_WAIT = 5.0
"""Seconds cancelled actions get to unwind before shutdown goes on without them."""
ACTION_ON_NOTICE = f"flag:{Flag.ACTION.value}:on"
WAKING_NOTICES = frozenset({NOTICE_WORK, ACTION_ON_NOTICE})

log = get_logger()


_ActionRun = Callable[[Record], Awaitable[object]]
ActionObserver = Callable[[Action[Any], Record, float, bool], None]
"""Told of each action run on a record: the action, the record, the seconds it took, and whether it succeeded."""
ClaimObserver = Callable[[Record], None]
"""Told of each record as it is claimed (the claim-latency histogram listens here)."""


async def run_actions(
    actions: Sequence[Action[Any]], record: Record, deadlines: Deadlines, observe: ActionObserver | None = None
) -> Failure | None:
    """Run every action on the record in order, each within its timeout; None when all succeed, else the first
    failure."""
    for action in actions:
        started = time.monotonic()
        succeeded = False
        try:
            failure = await _run_one(action, record, deadlines)
            succeeded = failure is None
        finally:
            # Cancelled (a shutdown), the action still took its time, but did not succeed.
            if observe is not None:
                observe(action, record, time.monotonic() - started, succeeded)
        if failure is not None:
            return failure
    return None


async def _run_one(action: Action[Any], record: Record, deadlines: Deadlines) -> Failure | None:
    """One action on one record: None on success, else what failed and whether that is an outage."""
    try:
        with deadlines.limit(action.timeout) as limit:
            try:
                # Run is declared to return None, but a plugin that returns a status (0 = success) is honoured.
                result = await cast(_ActionRun, action.run)(record)
            except asyncio.CancelledError:
                if not limit.timed_out():
                    raise
                return Failure(str(ActionTimeout(f"action {action.name} timed out after {action.timeout:g}s")))
    except ActionError as exc:
        return _failure(action, record, exc, f"{action.name}: {str(exc) or type(exc).__name__}")
    except Exception as exc:
        if not is_transient(exc):
            # Not an ActionError, nor the network's: probably a bug in the action, so the traceback goes to the log.
            log.error("action raised an unexpected error", action=action.name, id=record.id, exc_info=exc)
        return _failure(action, record, exc, f"{action.name}: {type(exc).__name__}: {exc}")
    if result is not None and result != 0:
        return Failure(f"{action.name}: returned {result!r}")
    return None


def _failure(action: Action[Any], record: Record, exc: Exception, message: str) -> Failure:
    if not is_transient(exc):
        return Failure(message)
    named = exc.destination if isinstance(exc, Retryable) else None
    return Failure(message, transient=True, destination=named or action.destination(record) or action.name)


def running_at_once(concurrency: int, actions: Sequence[Action[Any]]) -> int:
    """Records to run at once: ``concurrency``, or more if an action needs more to fill its batches."""
    return max([concurrency, *(action.records_at_once() for action in actions)])


class PopWorker:
    """One worker identity in the store: claims into its processing list, runs records, writes their outcomes."""

    def __init__(
        self,
        store: RecordPath,
        worker_id: str,
        queue: QueueSettings,
        actions: Sequence[Action[Any]],
        concurrency: int,
        notifier: Notifier,
        register: Callable[[], Awaitable[None]],
        *,
        observe_action: ActionObserver | None = None,
        observe_claim: ClaimObserver | None = None,
        on_failure: FailureObserver | None = None,
        breakers: Breakers | None = None,
    ) -> None:
        """``register`` registers the worker again when a claim finds it swept as dead; ``on_failure`` is told of
        every failure written; ``breakers`` (default: the default ``[pop]`` settings') pause claiming while a
        destination is unreachable."""
        self.store = store
        self.worker_id = worker_id
        self.actions = tuple(actions)
        self.configured = concurrency
        """``[pop] concurrency`` (or the command line's): what runs at once unless the actions need more."""
        self.concurrency = running_at_once(concurrency, actions)
        self.ledger = SlotLedger(self.concurrency)
        """The worker's slots: what it holds, what runs (every count of them lives there)."""
        self.outcomes = OutcomeWriter(store, worker_id, queue, notifier, self._slots_freed, on_failure=on_failure)
        self._register = register
        self._observe_action = observe_action
        self._observe_claim = observe_claim
        if breakers is None:
            defaults = PopSettings()
            breakers = Breakers(defaults.unreachable_after, defaults.probe_delay, defaults.probe_max_delay)
        self.breakers = breakers
        self._probe: str | None = None
        """The id of the record claimed as a probe of unreachable destinations, while it runs."""
        self._pulse = Pulse()
        self._deadlines = Deadlines()
        self._claim_lost = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self.windows = WindowGate(lambda: [(action.where(), action.windows) for action in self.actions])
        """The destinations' windows: outside one, nothing is claimed."""
        self._stopping = False
        self._claiming_started = False
        self._action_off = False

    @property
    def running(self) -> int:
        return len(self._tasks)

    def stats(self) -> dict[str, object]:
        """What the heartbeat publishes (``dataq-cli`` shows it)."""
        stats: dict[str, object] = {"done": self.outcomes.acknowledged, "failed": self.outcomes.failures,
                                    "waited": self.outcomes.postponements, "running": len(self._tasks)}
        if self.breakers.open:
            stats["unreachable"] = self.breakers.public()
        if self.windows.shut:
            stats["outside_window"] = self.windows.public()
        for action in self.actions:
            merge_status(stats, action.status())
        return stats

    def free_slots(self) -> int:
        """Records the next claim may take (:meth:`SlotLedger.free`), under what the actions need now: an action
        whose batches grew to fit its link (``network_move``'s tuner) needs more records running to fill them."""
        self.concurrency = self.ledger.concurrency = running_at_once(self.configured, self.actions)
        return self.ledger.free(postponing=self.outcomes.postponing, unreachable=self.breakers.open,
                                probe_running=self.breakers.probe_running)

    def responsive(self) -> bool:
        """For the watchdog: the claim loop and the outcome writer turned lately or wait by choice, and no action runs
        on past its time limit (which would hold its slot for good). Before claiming starts (Redis not answering yet)
        and once it is stopped on purpose, there is no loop to judge."""
        if not self._claiming_started or self._stopping:
            return True
        return (self._pulse.alive(STALL_AFTER) and self.outcomes.pulse.alive(STALL_AFTER)
                and not self._deadlines.overdue(CANCEL_WAIT + STALL_AFTER))

    def wake(self) -> None:
        """Something may be claimable now: try at once instead of at the next poll."""
        self._wake.set()

    def claiming(self) -> bool:
        """Not told to stop claiming yet (a call, not an attribute: it changes while the claim loop awaits)."""
        return not self._stopping

    def stop_claiming(self) -> None:
        self._stopping = True
        self._wake.set()

    async def claim_loop(self) -> None:
        """Claim and start records until :meth:`stop_claiming`; waits (never spins) when there is nothing to do."""
        backoff = Backoff(cap=HOT_RETRY_CAP)
        self._claiming_started = True
        while self.claiming():
            self._pulse.beat()
            self._wake.clear()
            now = time.time()
            if self.windows.look(now):
                await self._sleep(self.windows.wait(now))  # woken early by stop
                continue
            free = self.free_slots()
            if free <= 0:
                with self._pulse.resting():  # the actions' time limits keep this wait finite
                    await self._wake.wait()  # an action ended, a record written, or stop
                continue
            probing = self.breakers.open
            if probing and (wait := self.breakers.until_probe()) > 0:
                await self._sleep(wait)  # woken early by an action ending: a success ends the outage
                continue
            if not probing and free < self.concurrency // 4 and self.ledger.running:
                # Gather a few more free slots first: a claim of one or two records costs Redis and this daemon
                # nearly as much as a claim of dozens.
                await asyncio.sleep(GATHER_DELAY)
                if not self.claiming():  # stopped meanwhile
                    break
                free = self.free_slots()
            try:
                if self._claim_lost:
                    await self._recover_lost_claim()
                claim = await self.store.claim(self.worker_id, free)
                if claim.status is ClaimStatus.UNREGISTERED:
                    # Swept as dead (our heartbeat lapsed): a claim must not outrun the registry, or nobody
                    # could give its records back should we die.
                    await self._register()
                    continue
            except StoreUnavailable as exc:
                # The claim may have run with its reply lost: its records would sit in our processing list.
                self._claim_lost = True
                if backoff.attempt == 0:  # once per outage: retries come every half second at most
                    log.warning("redis unavailable; claiming paused", error=str(exc))
                await self._sleep(backoff.next_delay())
                continue
            backoff.reset()
            self._note_action_flag(claim.status is ClaimStatus.ACTION_OFF)
            if claim.records:
                if probing and self.breakers.open:
                    self._probe = claim.records[0].id
                    self.breakers.probe_started()
                    log.info("probing unreachable destinations", id=self._probe,
                             destinations=[outage.destination for outage in self.breakers.outages()])
                for record in claim.records:
                    self._start(record)
                continue
            await self._sleep(POLL_INTERVAL)

    async def finish(self, grace: float) -> int:
        """Let running actions end within ``grace`` seconds, then cancel the rest; returns how many were cancelled.

        A cancelled record is left unwritten in the processing list, for ``release`` to put back.
        """
        if not self._tasks:
            return 0
        log.info("waiting for running actions", running=len(self._tasks), grace_period=grace)
        pending = set(self._tasks)
        if grace > 0:
            _, pending = await asyncio.wait(pending, timeout=grace)
        if not pending:
            return 0
        log.warning("grace period over; cancelling running actions", count=len(pending))
        for task in pending:
            task.cancel()
        _, stuck = await asyncio.wait(pending, timeout=CANCEL_WAIT)
        if stuck:
            log.error("actions ignored cancellation; leaving them behind", count=len(stuck))
        return len(pending)

    async def _recover_lost_claim(self) -> None:
        """Run the records a claim with a lost reply moved into our processing list (else they would wait there
        until this daemon stops and releases them)."""
        before = self.ledger.ids()
        listed = await self.store.processing(self.worker_id)
        for record_id in listed:
            # Held before the listing, or since: ours already (written ones are gone from the list, or about to be).
            if record_id in before or self.ledger.holds(record_id):
                continue
            state = await self.store.record_state(record_id)
            if state is not None and state.where == "in-flight":
                log.info("running a record claimed by a call whose reply was lost", id=record_id)
                self._start(state.record)
        self._claim_lost = False

    def _start(self, record: Record) -> None:
        if self._observe_claim is not None:
            self._observe_claim(record)
        if self.ledger.claim(record.id):
            self.outcomes.claimed_again(record.id)
        task = asyncio.create_task(self._run(record), name=f"record {record.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, record: Record) -> None:
        started = time.monotonic()
        try:
            failure = await run_actions(self.actions, record, self._deadlines, self._observe_action)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # our shutdown: the record stays claimed, and release gives it back
            # A cancellation from inside an action (a library cancelling its own future) is the action failing;
            # left unwritten, the record would sit in our processing list, its slot lost, while we live.
            failure = Failure("action was cancelled from within")
        finally:
            self.ledger.end()
            self.wake()
        probe = self._probe == record.id
        if probe:
            self._probe = None
        if failure is None:
            self.breakers.succeeded()
            self.outcomes.succeeded(record, time.monotonic() - started)
        elif failure.transient:
            assert failure.destination is not None
            log.warning("destination unreachable; the record waits", id=record.id, path=record.path,
                        destination=failure.destination, error=failure.message)
            self.breakers.transient(failure.destination, failure.message, probe=probe)
            self.outcomes.postponed(record, failure.message)
        else:
            log.warning("action failed", id=record.id, path=record.path, error=failure.message)
            self.breakers.permanent(probe=probe)
            self.outcomes.failed(record, failure.message)

    def _slots_freed(self, ids: list[str]) -> None:
        self.ledger.written(ids)
        self.wake()

    def _note_action_flag(self, off: bool) -> None:
        if off != self._action_off:
            self._action_off = off
            log.info("action is off; claiming nothing until it is on" if off else "action is on; claiming")

    async def _sleep(self, seconds: float) -> None:
        """Wait by choice: nothing to claim, action off, or Redis away."""
        with self._pulse.resting(), contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()


def merge_status(stats: dict[str, object], status: Mapping[str, object]) -> None:
    """Add what an action says to its daemon's heartbeat ``stats``. A key that maps destinations to what holds them
    (``waiting_for_connection``, ``connections_held_back``) gathers every action's destinations: two actions of a
    queue (a ``network_move`` then a ``disk_store``) each add theirs."""
    for key, value in status.items():
        mine = stats.get(key)
        stats[key] = {**mine, **value} if isinstance(mine, dict) and isinstance(value, dict) else value
