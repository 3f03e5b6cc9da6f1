"""How a push daemon answers a receipts query (:mod:`dataq.custody.receipts`) from what its site knows of each id."""

from __future__ import annotations

from dataclasses import dataclass

from dataq.custody.receipts import Receipt, ReceiptKind, ReceiptQuery
from dataq.errors import InvalidRecord
from dataq.store import CustodyEntry, Known, Lost, Tracked
from dataq.store.remembered import Done

CUSTODY_STATE = "custody"
"""The state of a record a site has handed on and waits to hear of from its next site."""


@dataclass(frozen=True, slots=True)
class ReceiptDesk:
    """Answers receipts as site ``site`` whose queue deactivates records after ``max_errors`` failures and hands
    them on to ``next_sites`` (none: the end of the chain)."""

    site: str
    max_errors: int
    next_sites: tuple[str, ...] = ()

    def answer(self, record_id: str, known: Known) -> Receipt:
        """The answer about ``record_id``; see :mod:`dataq.custody.receipts` for when a site says which."""
        extra: dict[str, object] = {"from": self.site}
        if self.next_sites:
            extra["next"] = list(self.next_sites)
        if isinstance(known, Tracked):
            if known.pushed_at is not None:
                extra["pushed"] = round(known.pushed_at, 3)
            return Receipt(ReceiptKind.PENDING, record_id, self.site, state=known.state, error=known.last_error,
                           extra=extra)
        if isinstance(known, CustodyEntry):
            return self._in_custody(record_id, known, extra)
        if isinstance(known, Done):
            extra.update(pushed=round(known.pushed_at, 3), done=round(known.done_at, 3))
            if self.next_sites and known.end_at is None:
                # Done here before custody existed, or its custody lost: nothing here says the chain has it.
                return Receipt(ReceiptKind.PENDING, record_id, self.site, state=CUSTODY_STATE,
                               error="no receipt from the next site", extra=extra)
            return Receipt(ReceiptKind.DONE, record_id, self.site, at=known.confirmed_at, extra=extra)
        if isinstance(known, Lost):
            # Not held here any more: unknown, as for a record never seen, with what became of it.
            extra["lost"] = round(known.at, 3)
            return Receipt(ReceiptKind.UNKNOWN, record_id, self.site, error=f"lost: {known.why}", extra=extra)
        return Receipt(ReceiptKind.UNKNOWN, record_id, self.site, extra=extra)

    def _in_custody(self, record_id: str, entry: CustodyEntry, extra: dict[str, object]) -> Receipt:
        extra.update(pushed=round(entry.record.pushed_at or 0.0, 3), handed=round(entry.handed_at, 3))
        if entry.site:
            extra["next"] = [entry.site]
        last = entry.last
        if last is not None and last.receipt == ReceiptKind.PENDING:
            # Where the record is further on, as the next site said last time it was asked.
            return Receipt(ReceiptKind.PENDING, record_id, last.site, state=last.state, error=last.error,
                           extra={**extra, "via": self.site})
        waiting = last.describe() if last is not None else f"waiting for {entry.site or 'the hand-on spool'}"
        return Receipt(ReceiptKind.PENDING, record_id, self.site, state=CUSTODY_STATE, error=waiting, extra=extra)

    def lines(self, query: ReceiptQuery, known: list[Known]) -> str:
        """The answer lines of one query, in order; ``known`` holds what is known of its valid ids, in order."""
        answers = iter(known)
        parts = []
        for item in query.ids:
            if isinstance(item, InvalidRecord):
                parts.append(Receipt(ReceiptKind.REFUSED, error=str(item)).line())
            else:
                parts.append(self.answer(item, next(answers)).line())
        return "".join(parts)


def where_further_on(entry: CustodyEntry) -> str | None:
    """The site further on where a record in custody is, as the next site said last (None: not said)."""
    last = entry.last
    return last.site if last is not None and last.receipt == ReceiptKind.PENDING and last.site else None
