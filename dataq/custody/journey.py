"""A record's journey across the sites of a cascade, site by site (``dataq-cli --trace``).

The first hop is what this site knows (from its Redis, answered as its push daemon would answer a receipt
query); each further hop is the answer of the site the previous one hands records on to, asked over the wire
(:mod:`dataq.custody.receipts`) like the custody keeper asks it. The walk ends at the site that does not know the
record, a site that cannot be reached, or the end of the chain.
"""

from __future__ import annotations

import itertools
import ssl
from dataclasses import dataclass

from dataq.config.feed_settings import parse_target
from dataq.custody.client import ask
from dataq.custody.desk import CUSTODY_STATE, ReceiptDesk
from dataq.custody.receipts import Receipt, ReceiptKind
from dataq.errors import DataqError
from dataq.store.facets import CustodyFacet

MAX_HOPS = 16
"""Sites followed at most (a chain that loops back on itself ends here)."""
UNREACHABLE = "unreachable"
HANDED_ON = "handed on"


@dataclass(frozen=True, slots=True)
class Hop:
    """One site of the journey: where the record stands there, and when."""

    site: str
    state: str
    """``done``, ``handed on`` (waiting for a receipt), ``queued``, ``delayed``, ``inactive``, ``custody`` (handed on
    and no answer from the next site yet), ``unknown`` or ``unreachable`` (the site did not answer)."""
    address: str | None = None
    """The push daemon asked (None: this site, read from its Redis)."""
    pushed: float | None = None
    done: float | None = None
    handed: float | None = None
    confirmed: float | None = None
    """When the end of the chain had it, as this site's receipt says."""
    detail: str | None = None
    """The last error, or why the site could not be asked."""

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def hop_of(receipt: Receipt, address: str | None) -> Hop:
    """The hop one answer describes (the answering site's own facts, not those it passes on from further)."""
    extra = receipt.extra
    site = str(extra.get("from", receipt.site))
    pushed, done, handed = (_time(extra.get(name)) for name in ("pushed", "done", "handed"))
    if receipt.kind is ReceiptKind.DONE:
        return Hop(site, ReceiptKind.DONE, address, pushed, done, handed, confirmed=receipt.at)
    if receipt.kind is ReceiptKind.PENDING and receipt.site != site:  # passed on from further: here handed on
        return Hop(site, HANDED_ON, address, pushed, done, handed)
    state = (receipt.state or receipt.kind) if receipt.kind is ReceiptKind.PENDING else receipt.kind
    return Hop(site, state, address, pushed, done, handed, detail=receipt.error)


def _time(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True, slots=True)
class Tracer:
    """Traces records as site ``desk.site``, asking next sites over ``tls`` within ``within`` seconds each."""

    desk: ReceiptDesk
    tls: ssl.SSLContext | None
    within: float

    async def trace(self, store: CustodyFacet, record_id: str) -> list[Hop]:
        (known,) = await store.whereabouts([record_id], self.desk.max_errors)
        receipt = self.desk.answer(record_id, known)
        hops = [hop_of(receipt, None)]
        while len(hops) < MAX_HOPS and _goes_on(hops[-1]):
            addresses = [str(address) for address in receipt.extra.get("next", [])]
            if not addresses:
                break
            found = await self._ask_next(addresses, record_id)
            if isinstance(found, Hop):
                hops.append(found)
                break
            receipt, address = found
            hops.append(hop_of(receipt, address))
        return hops

    async def _ask_next(self, addresses: list[str], record_id: str) -> tuple[Receipt, str] | Hop:
        problems = []
        for address in addresses:
            try:
                host, port = parse_target(address)
                (receipt,) = await ask(host, port, [record_id], site=self.desk.site, tls=self.tls,
                                       within=self.within)
            except (DataqError, ValueError) as exc:
                problems.append(f"{address}: {exc}")
                continue
            return receipt, address
        return Hop(addresses[0], UNREACHABLE, addresses[0], detail="; ".join(problems))


def _goes_on(hop: Hop) -> bool:
    """Whether the record went further than this hop (so the next site is worth asking)."""
    return hop.state in (ReceiptKind.DONE, HANDED_ON, CUSTODY_STATE)


def latencies(hops: list[Hop]) -> list[float | None]:
    """Per hop, the seconds from its push at the previous site to its push here (None where a time is missing)."""
    out: list[float | None] = [None]
    for before, after in itertools.pairwise(hops):
        out.append(after.pushed - before.pushed if before.pushed is not None and after.pushed is not None else None)
    return out
