"""The push daemon's rules for the ``read`` flag: off when the queue is full or Redis's memory is high, back on
once every reason is gone (the flag itself, and who may switch it when, is :mod:`dataq.push.read_flag`).

Two high-water marks, each with its low-water mark: the active list's length (``max_queue_size``, back on below
``[push] resume_below``) and Redis's ``used_memory`` (``[push] max_memory``, back on below ``resume_memory``; the
2014 seed's roll threshold). The queue's length is checked after every group commit and its low-water mark at
every heartbeat; the memory by a watch of its own, every :data:`MEMORY_CHECK_INTERVAL`. Each decision is asked of
the flag after the wait on Redis that measured it: a notice that came during the wait is an operator's newer word.
"""

from __future__ import annotations

from dataq.config import PushSettings, QueueSettings
from dataq.logs import get_logger
from dataq.ops.notices import Notifier, memory_high_notice, read_off_notice, read_on_notice
from dataq.push.read_flag import ReadFlag
from dataq.store import QueueStore

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
    """The marks that make this daemon hold ``read`` off, measured and acted on through ``flag``."""

    def __init__(self, store: QueueStore, queue: QueueSettings, push: PushSettings, notifier: Notifier,
                 flag: ReadFlag) -> None:
        self.store, self.queue, self.push, self.notifier, self.flag = store, queue, push, notifier, flag
        self.used_memory: int | None = None
        """Redis's ``used_memory`` at the last memory check done (None before the first)."""
        self._warned_no_maxmemory = False

    async def queue_length(self, active: int) -> None:
        """After each group commit: the active list holds ``active`` records."""
        limit = self.queue.max_queue_size
        if active > limit and self.flag.may_cut_off(QUEUE_FULL):
            resume = self.push.resume_below
            log.warning(f"the active queue is full; read turned off. To re-enable: {REENABLE_HINT}", active=active,
                        max_queue_size=limit, queue=self.queue.name, resumes_below=resume)
            self.notifier.post(read_off_notice(self.queue.name, active, limit, resume))
            await self.flag.cut_off(QUEUE_FULL)

    async def check(self) -> None:
        """Every heartbeat: save a cut-off Redis missed; resume once the queue drained below ``resume_below``."""
        await self.flag.save_missed()
        resume_below = self.push.resume_below
        if resume_below is None or not self.flag.may_clear(QUEUE_FULL):
            return
        active = (await self.store.summary()).active
        if active < resume_below and self.flag.may_clear(QUEUE_FULL):  # still, after the wait
            log.info("the active queue drained; no longer holding read off", active=active, resume_below=resume_below)
            await self._clear(QUEUE_FULL, f"fewer than {resume_below} records are active")

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
            if self.flag.may_cut_off(MEMORY_HIGH):  # once, and never an operator's
                limit, resume = limits
                log.warning("redis memory is high; read turned off until it is below resume_memory", used_memory=used,
                            max_memory=limit, resume_memory=resume, queue=self.queue.name)
                self.notifier.post(memory_high_notice(self.queue.name, used, limit, resume))
                await self.flag.cut_off(MEMORY_HIGH)
        elif self.flag.may_clear(MEMORY_HIGH) and (limits is None or used < limits[1]):
            # Below resume_memory, or no limit any more (maxmemory unset since): nothing to hold read off for.
            log.info("redis memory is low again; no longer holding read off", used_memory=used, limits=limits)
            await self._clear(MEMORY_HIGH, "Redis's memory is below resume_memory" if limits is not None
                              else "Redis sets no maxmemory any more")
        self.used_memory = used

    async def _clear(self, reason: str, why: str) -> None:
        if await self.flag.clear(reason):
            self.notifier.post(read_on_notice(self.queue.name, why))
