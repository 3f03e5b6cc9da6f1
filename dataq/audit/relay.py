"""Passing audit questions on along the chain: the answer a site gives about each id is its own state followed by
the answers of the sites after it, which it asks itself (:func:`~dataq.audit.chain.walk`), so that an auditing
site needs to reach only its own next sites, as its records do.

A push daemon answers an audit question that asks it to pass it on (``"forward": N``, N sites further at most)
here rather than in its committer: asking the next sites takes round trips, and the records of every other
connection must not wait for them. Arrived questions (:mod:`dataq.audit.arrived`) are answered here too: they read the
storing root, not Redis, and an audit connection asks them beside its audit questions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace

from dataq.audit.arrived import ARRIVED_KEY, arrived_lines
from dataq.audit.chain import MAX_HOPS, Ask, walk
from dataq.audit.questions import Answer, AuditDesk, SiteState
from dataq.custody.receipts import ReceiptQuery
from dataq.errors import InvalidRecord, StoreError
from dataq.logs import get_logger
from dataq.store import QueueStore

WHEREABOUTS_CHUNK = 1000
"""Ids read from this site's Redis per round trip."""

LEAST_WITHIN = 1.0
"""Seconds the next sites are given at least when the asker's time has run out: they are still tried."""

AskFor = Callable[[int, float | None], Ask]
"""How this site asks its next sites, passing each question on so many sites further, within so many seconds."""

log = get_logger()


async def this_site(store: QueueStore, desk: AuditDesk, ids: list[str]) -> dict[str, Answer]:
    """This site's answer about each id, from its Redis and its stored copies (if it stores any); StoreError if
    Redis cannot be read."""
    # The copies are looked at in a thread while Redis answers.
    looking = asyncio.ensure_future(asyncio.to_thread(desk.copies_said, ids))
    try:
        known = [item for start in range(0, len(ids), WHEREABOUTS_CHUNK)
                 for item in await store.whereabouts(ids[start:start + WHEREABOUTS_CHUNK], desk.max_errors)]
    finally:
        copies = await looking
    return {record_id: desk.answer(record_id, item, copies.get(record_id))
            for record_id, item in zip(ids, known, strict=True)}


@dataclass(frozen=True, slots=True)
class Relay:
    """Answers the audit questions a site is asked to pass on, as ``desk``'s site, asking its next sites with
    ``ask_for`` (None: it has no way to, and answers for itself alone)."""

    store: QueueStore
    desk: AuditDesk
    ask_for: AskFor | None = None

    async def answer(self, queries: list[ReceiptQuery], deadline: float | None = None) -> list[str]:
        """The answer lines of each question, in order: an arrived question's one line (:mod:`dataq.audit.arrived`), an
        audit question's one line per id, asking the next sites about all of their ids at once, by ``deadline``
        (the event loop's time; None: within what each question says)."""
        arrived = [query for query in queries if query.key == ARRIVED_KEY]
        if not arrived:
            return await self._audit(queries, deadline)
        asked = [query for query in queries if query.key != ARRIVED_KEY]
        arrived_answers = iter(await asyncio.to_thread(arrived_lines, self.desk, arrived))
        audit_answers = iter(await self._audit(asked, deadline) if asked else [])
        return [next(arrived_answers if query.key == ARRIVED_KEY else audit_answers) for query in queries]

    async def _audit(self, queries: list[ReceiptQuery], deadline: float | None) -> list[str]:
        """The answer lines of each audit question, in order (one line per id)."""
        ids = list(dict.fromkeys(record_id for query in queries for record_id in query.valid))
        try:
            first = await this_site(self.store, self.desk, ids)
        except StoreError as exc:
            log.warning("cannot read this site's records to answer an audit question", error=str(exc))
            return [_refused(query, f"audit: {self.desk.site or 'this site'} cannot read its records: {exc}")
                    for query in queries]
        # Never further than an audit goes: a question that asks more (a loop, or a peer's mistake) ends there.
        forward = min(max((query.forward for query in queries), default=0), MAX_HOPS - 1)
        if forward and self.desk.next_sites and self.ask_for is not None and first:
            # Reckoned now, after this site's own answers: what they took is not the next sites' to wait.
            within = None if deadline is None else max(deadline - asyncio.get_running_loop().time(), LEAST_WITHIN)
            if within is None:
                within = min((query.within for query in queries if query.within is not None), default=None)
            journeys = await walk(first, self.ask_for(forward - 1, within), max_hops=forward + 1)
            first = {record_id: replace(answer, further=tuple(journeys[record_id][1:]))
                     for record_id, answer in first.items()}
        return [self._lines(query, first) for query in queries]

    def _lines(self, query: ReceiptQuery, answers: dict[str, Answer]) -> str:
        parts = []
        for item in query.ids:
            if isinstance(item, InvalidRecord):
                parts.append(Answer("", SiteState.UNKNOWN, self.desk.site, refused=str(item)).line())
            else:
                parts.append(answers[item].line())
        return "".join(parts)


def _refused(query: ReceiptQuery, why: str) -> str:
    """Every id of ``query`` refused with ``why`` (each id is answered, so the asker's count of lines holds)."""
    return "".join(Answer("", SiteState.UNKNOWN, "", refused=str(item) if isinstance(item, InvalidRecord) else why)
                   .line() for item in query.ids)

