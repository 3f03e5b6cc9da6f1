"""The push daemon's ``read`` flag: one object holds what the daemon knows of it and why the daemon itself holds
reading off, and every change goes through one of four named transitions.

- **operator switch** (:meth:`ReadFlag.operator_switch`): a ``flag:read:on|off`` notice. Notices do not say who
  switched, so every one is taken as an operator's word: a switch on forgets every reason of this daemon's, and a
  cut-off Redis has not saved yet is not saved after all (it would undo the operator).
- **Redis answer** (:meth:`ReadFlag.refresh`): the flag read from Redis (at the start and at every heartbeat,
  since notices sent while the subscription was down are lost). An answer older than what the daemon knows is
  dropped: one that crossed a switch made here meanwhile (a notice, or this daemon's own cut-off), or one read
  while a cut-off was not yet acknowledged by Redis (its write may land after the read, yet be acknowledged
  before the answer comes back).
- **rule cut-off** (:meth:`ReadFlag.cut_off`): a rule (the queue full, Redis's memory high) holds reading off
  for its reason. Never while reading is off by an operator's hand (off, with no reason of this daemon's): only
  an operator turns that on again. The daemon stops reading at once and saves ``off`` to Redis; a save Redis
  refused is retried at every heartbeat (:meth:`ReadFlag.save_missed`), never while another is under way (a
  second switch in the events stream, a second notice to every daemon).
- **rule clear** (:meth:`ReadFlag.clear`): the rule's reason is gone; once no reason is left, ``on`` is written to
  Redis and reading starts again.

Whether reading is on is asked at each decision, after every wait on Redis: a notice that came during the wait
is an operator's newer word. The gate (:mod:`dataq.push.gate`) is closed while reading is off, and until the
first answer or notice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from dataq.errors import StoreError
from dataq.logs import get_logger
from dataq.push.gate import BLOCK_READ_OFF, BLOCK_STARTING, Gate

log = get_logger()

ReadFromRedis = Callable[[], Awaitable[bool]]
"""Reads the ``read`` flag from Redis."""
WriteToRedis = Callable[[bool], Awaitable[object]]
"""Writes the ``read`` flag to Redis as this daemon (StoreError when Redis refuses)."""


class ReadFlag:
    """The ``read`` flag as this push daemon knows it (see the module's docstring for the transitions)."""

    def __init__(self, gate: Gate, read: ReadFromRedis, write: WriteToRedis) -> None:
        self._gate, self._read, self._write = gate, read, write
        self._on = False
        self._reasons: set[str] = set()
        self._unsaved = False
        self._saves_under_way = 0
        self._switches = 0
        """How many times ``read`` was switched here: an answer read across a switch is stale."""

    @property
    def on(self) -> bool:
        """Whether this daemon reads its feeders as far as the flag goes (the gate may be closed for more)."""
        return self._on

    @property
    def reasons(self) -> frozenset[str]:
        """The rules' reasons this daemon holds reading off for (empty: it holds nothing off)."""
        return frozenset(self._reasons)

    @property
    def unsaved(self) -> bool:
        """Reading is off here by a cut-off that Redis has not acknowledged yet."""
        return self._unsaved

    def holds(self, reason: str) -> bool:
        return reason in self._reasons

    # --- operator switch ----------------------------------------------------------------------------------

    def operator_switch(self, on: bool, how: str = "notice") -> None:
        """Someone switched ``read`` (a notice says so)."""
        self._switch(on, how)

    # --- Redis answer -------------------------------------------------------------------------------------

    async def refresh(self, how: str) -> None:
        """Read the flag from Redis and take the answer, unless it is older than what this daemon knows."""
        switches, saving = self._switches, self._unsaved
        on = await self._read()
        # A cut-off begun during the read is a switch, which the counter sees.
        if switches == self._switches and not saving:
            self._switch(on, how)

    # --- rule cut-off -------------------------------------------------------------------------------------

    def may_cut_off(self, reason: str) -> bool:
        """Whether a rule's mark passed now is this daemon's to act on: not held for ``reason`` already, and
        not off by an operator's hand."""
        return reason not in self._reasons and (self._on or bool(self._reasons))

    async def cut_off(self, reason: str) -> bool:
        """Hold reading off for ``reason``: stop reading now and save ``off`` in Redis (retried later if Redis
        refuses). False if it is not this daemon's to do (see :meth:`may_cut_off`)."""
        if not self.may_cut_off(reason):
            return False
        self._reasons.add(reason)
        if self._on:
            self._switch(False, reason)
            self._unsaved = True
            await self._save()
        return True

    async def save_missed(self) -> None:
        """Every heartbeat: save a cut-off Redis refused, unless a save is under way."""
        if self._unsaved and not self._saves_under_way:
            await self._save()

    async def _save(self) -> None:
        self._saves_under_way += 1
        try:
            await self._write(False)
        except StoreError as exc:
            log.warning("cannot turn read off in Redis yet; retrying", error=str(exc))
        else:
            self._unsaved = False
        finally:
            self._saves_under_way -= 1

    # --- rule clear ---------------------------------------------------------------------------------------

    def may_clear(self, reason: str) -> bool:
        """Whether ``reason`` holds reading off here and in Redis: only then is there something of this
        daemon's to undo."""
        return reason in self._reasons and not self._unsaved and not self._on

    async def clear(self, reason: str) -> bool:
        """``reason`` holds reading off no more; once no reason does, write ``on`` to Redis and read again.
        True when reading was turned on (the caller tells the operators why)."""
        self._reasons.discard(reason)
        if self._reasons:
            return False  # still held off for another reason (cleared by its own rule)
        try:
            await self._write(True)
        except BaseException:
            self._reasons.add(reason)  # still off in Redis, and still this daemon's: the rule tries again
            raise
        self._switch(True, "resumed")
        return True

    # ------------------------------------------------------------------------------------------------------

    def _switch(self, on: bool, how: str) -> None:
        self._switches += 1
        if on:  # by an operator, or this daemon's own clear: nothing is held off any more
            self._reasons.clear()
            self._unsaved = False
        if on != self._on or self._gate.blocks(BLOCK_STARTING):
            log.info("read flag " + ("on" if on else "off"), how=how)
        self._on = on
        self._gate.block(BLOCK_READ_OFF, not on)
        self._gate.block(BLOCK_STARTING, False)
