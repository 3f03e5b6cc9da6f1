"""Asking the chain afresh: this site's answer about each file's record, then each next site's, site after site to
the end of the chain (the audit questions of :mod:`dataq.audit.questions`).

A site asks only its own next sites: each passes the question on to its next sites and answers with its own state
followed by theirs (``further``), so the answer comes back along the links the records took, and a site need not
reach any site but its next. A site that answered without passing the question on (an audit question that went
through :data:`MAX_HOPS` sites) is asked further by the asker itself.

Every id goes on to the next site, not only those this site handed on: a site that forgot a record long done (its
``remember_done`` passed) must not hide a copy the archive still holds. A site that cannot be asked (unreachable,
silent, or too old to speak audit questions) ends the walk of its ids with a :class:`Silent` hop, and the
classification reports them as far as the chain could tell.
"""

from __future__ import annotations

import itertools
import ssl
from collections.abc import Awaitable, Callable, Sequence

from dataq.audit import arrived
from dataq.audit.questions import AUDIT_KEY, Answer, CopyState, Silent, SiteState, parse_answers
from dataq.config.feed_settings import parse_target
from dataq.custody.client import NotSpoken, ask_lines, exchange
from dataq.errors import DataqError, ProtocolError
from dataq.handshake import Capability, PeerBook

MAX_HOPS = 16
"""Sites followed at most (a chain that loops back on itself ends here)."""
SECONDS_PER_ID = 0.002
"""Time a site is given per id asked, beyond the hand-on's timeout: 100,000 ids get 200 s more."""
PASSED_ON_SHARE = 0.75
"""The share of its own wait a site gives the question it passes on: its asker still hears why a site further on
was silent, rather than timing out on it."""
FIRST_WAIT_FACTOR = 2.0
"""A question passed on is waited for this many times a single site's time: the sites further on answer in it."""

__all__ = ["MAX_HOPS", "ArrivedAsk", "Ask", "Ends", "Hop", "Silent", "arrived_asker", "asker", "walk"]


Hop = Answer | Silent
Ask = Callable[[str, list[str]], Awaitable[list[Answer]]]
"""Asks the push daemon at an address about ids: their answers in order (DataqError if it cannot)."""
ArrivedAsk = Callable[[str, list[str]], Awaitable[tuple[set[str], str]]]
"""Asks the push daemon at an address which of ids it holds (:mod:`dataq.audit.arrived`): those, and its site's name
(NotSpoken if it does not speak arrived questions, DataqError if it cannot be asked)."""


def asker(site: str, tls: ssl.SSLContext | None, timeout: float, peers: PeerBook | None = None, *,
          forward: int = MAX_HOPS - 2, within: float | None = None) -> Ask:
    """How site ``site`` asks a push daemon, over ``tls``: to pass each question on ``forward`` sites further,
    waiting ``within`` seconds (None: ``timeout`` seconds plus a little per id, twice over when passed on)."""
    book = peers or PeerBook()

    async def ask(address: str, ids: list[str]) -> list[Answer]:
        try:
            host, port = parse_target(address)
        except ValueError as exc:
            raise DataqError(f"{address}: {exc}") from None
        wait = within if within is not None else \
            (timeout + SECONDS_PER_ID * len(ids)) * (FIRST_WAIT_FACTOR if forward else 1.0)
        lines = await ask_lines(host, port, ids, site=site, tls=tls, within=wait, peer=book[address],
                                capability=Capability.AUDIT, key=AUDIT_KEY, forward=forward,
                                passed_within=wait * PASSED_ON_SHARE if forward else None)
        return parse_answers(lines, ids)

    return ask


def arrived_asker(site: str, tls: ssl.SSLContext | None, timeout: float, peers: PeerBook | None = None) -> ArrivedAsk:
    """How site ``site`` asks a push daemon, over ``tls``, which records it holds, waiting ``timeout`` seconds plus a
    little per id."""
    book = peers or PeerBook()

    async def ask(address: str, ids: list[str]) -> tuple[set[str], str]:
        try:
            host, port = parse_target(address)
        except ValueError as exc:
            raise DataqError(f"{address}: {exc}") from None
        starts = range(0, len(ids), arrived.IDS_PER_QUESTION)
        lines = await exchange(
            host, port, tls=tls, within=timeout + SECONDS_PER_ID * len(ids), peer=book[address],
            capability=Capability.ARRIVED, what="arrived questions",
            questions=lambda _: ([arrived.question_line(ids[start:start + arrived.IDS_PER_QUESTION], site)
                                  for start in starts], len(starts)))
        found: set[str] = set()
        answering = ""
        for start, line in zip(starts, lines, strict=True):
            part = ids[start:start + arrived.IDS_PER_QUESTION]
            marks, answering = arrived.parse_answer(line, len(part))
            found.update(itertools.compress(part, (mark == arrived.HERE for mark in marks)))
        return found, answering

    return ask


class Ends:
    """The addresses of the end of the chain, once a walk has reached it: later groups of files are asked there
    first, and only those it does not hold are followed site by site (a morning's audit of a healthy chain then
    asks one site, not every site, about every file). An end that cannot be reached from here (a site that only
    its previous site reaches) is not asked again."""

    def __init__(self, arrived_ask: ArrivedAsk | None = None) -> None:
        self.addresses: tuple[str, ...] | None = None
        self.unreachable = False
        self.arrived_ask = arrived_ask
        """Asks the end which records have arrived there, in one mark per id (None, or an end that does not speak
        arrived questions: it is asked the full audit question)."""

    def learn(self, hops: list[Hop]) -> None:
        """Where the end of the chain is, from a journey that reached it: the previous site's next sites."""
        if self.addresses is not None or self.unreachable or len(hops) < 2:
            return
        end, before = hops[-1], hops[-2]
        if isinstance(end, Answer) and isinstance(before, Answer) and end.refused is None and not end.next_sites:
            self.addresses = before.next_sites

    async def arrived(self, ids: list[str], ask: Ask) -> dict[str, Answer]:
        """The answers of the end of the chain that prove it holds a copy (none while its address is unknown,
        or when it does not answer)."""
        if self.addresses is None or self.unreachable or not ids:
            return {}
        if self.arrived_ask is not None:
            marked = await self._arrived_marks(self.addresses, ids, self.arrived_ask)
            if marked is not None:
                return marked
        answered = await _first_answering(self.addresses, ids, ask)
        if isinstance(answered, Silent):
            self.unreachable = True
            return {}
        return {answer.record_id: answer for answer in answered
                if answer.copy is CopyState.PRESENT and not answer.next_sites}

    async def _arrived_marks(self, addresses: tuple[str, ...], ids: list[str],
                          arrived_ask: ArrivedAsk) -> dict[str, Answer] | None:
        """:meth:`arrived`, by an arrived question to the first of ``addresses`` that answers it (None: the end does not
        speak arrived questions)."""
        for address in addresses:
            try:
                found, site = await arrived_ask(address, ids)
            except (NotSpoken, ProtocolError):
                # An older end, or one whose marks cannot be read: the full question, from now on.
                self.arrived_ask = None
                return None
            except DataqError:
                continue
            # One answer stands for every file arrived there: it says what the end proved (a copy there with its
            # size, at a site that hands nothing on), and its state was not asked.
            holds = Answer("", SiteState.UNKNOWN, site, copy=CopyState.PRESENT)
            return dict.fromkeys(found, holds)
        self.unreachable = True
        return {}


async def walk(first: dict[str, Answer], ask: Ask, ends: Ends | None = None, *,
               max_hops: int = MAX_HOPS) -> dict[str, list[Hop]]:
    """Each id's hops: this site's answer (``first``), then every next site's, to the end of the chain (whose
    addresses ``ends`` learns) or ``max_hops`` sites in all."""
    journeys: dict[str, list[Hop]] = {record_id: [answer] for record_id, answer in first.items()}
    going = list(first)
    while going:
        groups: dict[tuple[str, ...], list[str]] = {}
        for record_id in going:
            hops = journeys[record_id]
            last = hops[-1]
            if isinstance(last, Answer) and last.next_sites and last.refused is None and len(hops) < max_hops:
                groups.setdefault(last.next_sites, []).append(record_id)
        going = []
        for addresses, ids in groups.items():
            answered = await _first_answering(addresses, ids, ask)
            if isinstance(answered, Silent):
                for record_id in ids:
                    journeys[record_id].append(answered)
                continue
            for record_id, answer in zip(ids, answered, strict=True):
                hops = journeys[record_id]
                hops += [answer, *answer.further][:max_hops - len(hops)]
                if ends is not None:
                    ends.learn(hops)
            going += ids
    return journeys


async def _first_answering(addresses: Sequence[str], ids: list[str], ask: Ask) -> list[Answer] | Silent:
    """The answers of the first of ``addresses`` that answers (as the hand-on fails over), or why none did; ids it
    does not know are asked of the others too (a record handed to a second next site while the first was down),
    and the answer of one that knows them kept."""
    problems: list[str] = []
    older = True
    for position, address in enumerate(addresses):
        try:
            answers = await ask(address, ids)
        except NotSpoken as exc:
            problems.append(f"{address}: {exc}")
            continue
        except DataqError as exc:
            older = False
            problems.append(f"{address}: {exc}")
            continue
        return await _known_elsewhere(answers, addresses[position + 1:], ask)
    return Silent(addresses[0], "; ".join(problems), older)


async def _known_elsewhere(answers: list[Answer], others: Sequence[str], ask: Ask) -> list[Answer]:
    """``answers``, with those that know nothing replaced by another next site's that knows the record."""
    by_id = {answer.record_id: answer for answer in answers}
    for address in others:
        unknown = [record_id for record_id, answer in by_id.items() if _knows_nothing(answer)]
        if not unknown:
            break
        try:
            found = await ask(address, unknown)
        except DataqError:
            continue  # a silent second site changes nothing of what the first said
        by_id.update({answer.record_id: answer for answer in found if not _knows_nothing(answer)})
    return [by_id[answer.record_id] for answer in answers]


def _knows_nothing(answer: Answer) -> bool:
    return answer.refused is None and answer.state is SiteState.UNKNOWN and answer.copy is None
