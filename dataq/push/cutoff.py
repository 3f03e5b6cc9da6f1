"""The push daemon's own hand on the ``read`` flag: off when the queue is full or Redis's memory is high, back on
once every reason it had is gone.

Two high-water marks, each with its low-water mark: the active list's length (``max_queue_size``, back on below
``[push] resume_below``) and Redis's ``used_memory`` (``[push] max_memory``, back on below ``resume_memory``; the
2014 seed's roll threshold). The queue's length is checked after every group commit and its low-water mark at
every heartbeat; the memory by a watch of its own, every :data:`MEMORY_CHECK_INTERVAL`. An operator's switch always
wins: ``read`` that was off before a mark was passed is never turned on here, and ``read`` turned on by an operator
forgets every reason this daemon had. Whether ``read`` is on is asked at each decision, after any wait on Redis: a
notice that came during the wait is an operator's newer word.
"""

from __future__ import annotations

from collections.abc import Callable

from dataq.config import PushSettings, QueueSettings
from dataq.errors import StoreError
from dataq.logs import get_logger
from dataq.ops.notices import Notice, Notifier, memory_high_notice, read_off_notice, read_on_notice
from dataq.store import Flag, QueueStore

AUTO_WHO = "push:auto"
"""Who the event stream says switched ``read`` when this daemon did."""
REENABLE_HINT = "dataq-cli --read on"
QUEUE_FULL = "queue full"
MEMORY_HIGH = "redis memory high"
MEMORY_CHECK_INTERVAL = 1.0
"""Seconds between two reads of Redis's memory (``INFO memory``) by the push daemon's memory watch, while
``[push] max_memory`` is set."""

log = get_logger()


class ReadCutoff:
    """Why this daemon holds ``read`` off; ``set_read(on, how)`` switches the daemon's own reading."""

    def __init__(self, store: QueueStore, queue: QueueSettings, push: PushSettings, notifier: Notifier,
                 set_read: Callable[[bool, str], None], read_on: Callable[[], bool]) -> None:
        self.store, self.queue, self.push, self.notifier = store, queue, push, notifier
        self._set_read, self._read_on = set_read, read_on
        self.reasons: set[str] = set()
        """The marks passed since this daemon turned ``read`` off (empty: it holds nothing off)."""
        self.unsaved = False
        """``read`` is off here, but Redis does not know yet (set_flag failed): retried at every check."""
        self._saves_under_way = 0
        """Saves of the cut-off under way (two, should an operator's switch-on and a new mark come during one).
        While there is one, a check does not send another (a second switch in the events stream, a second notice
        to every daemon)."""
        self.used_memory: int | None = None
        """Redis's ``used_memory`` at the last memory check done (None before the first)."""
        self._warned_no_maxmemory = False

    def forget(self) -> None:
        """An operator turned ``read`` on: nothing is held off any more, and a cut-off Redis missed is not saved
        after all (it would undo the operator's switch)."""
        self.reasons.clear()
        self.unsaved = False

    async def queue_length(self, active: int) -> None:
        """After each group commit: the active list holds ``active`` records."""
        limit = self.queue.max_queue_size
        if active > limit and QUEUE_FULL not in self.reasons and self._may_hold_off():
            resume = self.push.resume_below
            log.warning(f"the active queue is full; read turned off. To re-enable: {REENABLE_HINT}", active=active,
                        max_queue_size=limit, queue=self.queue.name, resumes_below=resume)
            await self._hold_off(QUEUE_FULL, read_off_notice(self.queue.name, active, limit, resume))

    async def check(self) -> None:
        """Every heartbeat: save a cut-off Redis missed; resume once the queue drained below ``resume_below``."""
        if self.unsaved and not self._saves_under_way:
            await self._save()
        resume_below = self.push.resume_below
        if QUEUE_FULL not in self.reasons or resume_below is None or not self._may_resume():
            return
        active = (await self.store.summary()).active
        if active < resume_below and QUEUE_FULL in self.reasons and self._may_resume():  # still, after the wait
            log.info("the active queue drained; no longer holding read off", active=active, resume_below=resume_below)
            await self._release(QUEUE_FULL, f"fewer than {resume_below} records are active")

    async def memory(self) -> None:
        """Every :data:`MEMORY_CHECK_INTERVAL` (with ``max_memory`` set): hold ``read`` off once Redis's memory
        reaches ``max_memory``, and let go below ``resume_memory``."""
        used, maxmemory = await self.store.memory_usage()
        limits = self.push.memory_limits(maxmemory)
        if limits is None and not self._warned_no_maxmemory:
            log.warning("[push] max_memory is a fraction of Redis's maxmemory, which this Redis does not set: "
                        "memory is not watched until it is", max_memory=self.push.max_memory)
        self._warned_no_maxmemory = limits is None  # warned once, and again if maxmemory comes and goes
        if limits is not None and used >= limits[0]:
            if MEMORY_HIGH not in self.reasons and self._may_hold_off():  # once, and never an operator's
                limit, resume = limits
                log.warning("redis memory is high; read turned off until it is below resume_memory", used_memory=used,
                            max_memory=limit, resume_memory=resume, queue=self.queue.name)
                await self._hold_off(MEMORY_HIGH, memory_high_notice(self.queue.name, used, limit, resume))
        elif MEMORY_HIGH in self.reasons and self._may_resume() and (limits is None or used < limits[1]):
            # Below resume_memory, or no limit any more (maxmemory unset since): nothing to hold read off for.
            log.info("redis memory is low again; no longer holding read off", used_memory=used, limits=limits)
            await self._release(MEMORY_HIGH, "Redis's memory is below resume_memory" if limits is not None
                                else "Redis sets no maxmemory any more")
        self.used_memory = used

    def _may_hold_off(self) -> bool:
        """Whether a mark passed now is this daemon's to act on: not while ``read`` is off by an operator's hand
        (off, with no reason of this daemon's), which only an operator turns on again."""
        return self._read_on() or bool(self.reasons)

    async def _hold_off(self, reason: str, notice: Notice) -> None:
        if not self._may_hold_off():
            return  # off already, by an operator: theirs to turn on
        self.reasons.add(reason)
        self.notifier.post(notice)
        if self._read_on():
            self._set_read(False, reason)
            self.unsaved = True
            await self._save()

    async def _save(self) -> None:
        self._saves_under_way += 1
        try:
            await self.store.set_flag(Flag.READ, False, who=AUTO_WHO)
        except StoreError as exc:
            log.warning("cannot turn read off in Redis yet; retrying", error=str(exc))
        else:
            self.unsaved = False
        finally:
            self._saves_under_way -= 1

    def _may_resume(self) -> bool:
        """Whether ``read`` is off here and in Redis: only then is there something of this daemon's to undo."""
        return not self.unsaved and not self._read_on()

    async def _release(self, reason: str, why: str) -> None:
        """``reason`` holds ``read`` off no more; once no reason does, turn it back on (``why``: the last one's
        end, for the notice)."""
        self.reasons.discard(reason)
        if self.reasons:
            return  # still held off for another reason (checked and released on its own)
        try:
            await self.store.set_flag(Flag.READ, True, who=AUTO_WHO)
        except BaseException:
            self.reasons.add(reason)  # still off in Redis, and still this daemon's: the next check tries again
            raise
        self._set_read(True, "resumed")
        self.notifier.post(read_on_notice(self.queue.name, why))
