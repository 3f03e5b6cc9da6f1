"""``network_move``'s side of custody: each record it hands on is kept in custody (group-committed), custody is
bounded by ``custody_max``, and the custody keeper (:mod:`dataq.custody.keeper`) runs beside the pop daemon's
workers with the hand-on's TLS, spool and handshakes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from dataq.custody.keeper import CustodyKeeper, KeeperOptions, remove_if_unchanged
from dataq.custody.report import PEERS_KEY
from dataq.errors import Retryable
from dataq.record import Record
from dataq.store.custody import CustodyEntry

from .base import ActionContext
from .batcher import MicroBatcher
from .handon import HandOn
from .move_options import NetworkMoveOptions

KEEPS_PER_CALL = 1000
"""Custody entries one Redis call keeps at most."""


class SenderCustody:
    """What ``network_move`` does for custody: keep each record it hands on, and run the keeper beside it."""

    def __init__(self, handon: HandOn, context: ActionContext, options: NetworkMoveOptions) -> None:
        self.handon, self.context, self.options = handon, context, options
        self.keeper: CustodyKeeper | None = None
        self._stop = asyncio.Event()
        self._held = 0
        """Records in custody, as last read (each keep says)."""
        self._keeps: MicroBatcher[CustodyEntry, int] = MicroBatcher(self._keep_batch, size=KEEPS_PER_CALL, age=0.0)
        """Group commit of the keeps: one call while another is at Redis takes every keep that came meanwhile."""

    def start(self) -> None:
        """Start the keeper (after the hand-on, whose TLS and spool it uses)."""
        custody, options = self.context.custody, self.options
        if custody is None or not options.custody:
            return
        keeper_options = KeeperOptions(options.next_sites, self.context.site, options.receipt_interval,
                                       options.resend_after, options.receipt_alarm, options.handon_timeout,
                                       options.after_receipt, self.context.queue.name)
        self.keeper = CustodyKeeper(custody, keeper_options, tls=self.handon.tls, remove_source=remove_if_unchanged,
                                    notifier=self.context.notifier, spooled=self.handon.spooled,
                                    peers=self.handon.peers, next_sites=self.handon.next_sites)
        self.keeper.start(self._stop)

    async def check_room(self) -> None:
        """Before a hand-on: Retryable while custody holds ``custody_max`` records (the queue waits, as for an
        outage, until receipts make room), so custody stays bounded."""
        custody, options = self.context.custody, self.options
        if custody is None or not options.custody or self._held < options.custody_max:
            return
        self._held = await custody.custody_count()
        if self._held >= options.custody_max:
            raise Retryable(f"custody is full: {self._held} records handed on wait for their receipts "
                            f"(custody_max {options.custody_max})",
                            destination="custody (receipts from the next sites)")

    async def keep(self, record: Record, site: str, identity: tuple[int, ...] | None) -> None:
        """Put a record just handed on to ``site`` in custody (records kept at once share one Redis call)."""
        if self.context.custody is None or not self.options.custody:
            return
        self._held = await self._keeps.submit(CustodyEntry(record, site, time.time(), identity=identity))

    async def _keep_batch(self, entries: list[CustodyEntry]) -> list[int]:
        assert self.context.custody is not None
        now = time.time()
        held = await self.context.custody.keep(entries, now + self.options.receipt_interval, now)
        return [held] * len(entries)

    def status(self) -> Mapping[str, object]:
        """The next sites that cannot be asked for receipts, and why (for the heartbeat)."""
        keeper = self.keeper
        if keeper is None:
            return {}
        no_receipts = keeper.no_receipts
        if not (keeper.down or no_receipts):
            return {}
        problems = {site: f"does not answer: {error}" for site, error in keeper.down.items()}
        problems.update({site: f"does not speak receipts, so its records stay in custody and their sources are "
                               f"kept: {speaks}" for site, speaks in no_receipts.items()})
        return {PEERS_KEY: problems}

    async def close(self, grace: float) -> None:
        await self._keeps.close(grace)
        self._stop.set()
        if self.keeper is not None:
            await self.keeper.close()
