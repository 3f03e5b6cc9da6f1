"""A site's kept links to its next sites (``next_sites``, in order): hand-ons go to the first that answers,
receipts queries to the site each record went to, all over the same pipelined connections
(:class:`~dataq.nextsite.link.SiteLink`).

A next site that could not be reached is skipped by hand-ons for a while (half a second, doubling while it stays
away, :data:`COOL_DOWN_CAP` at most) instead of being tried again by each one: a site whose address is a black
hole would otherwise cost every hand-on its ``timeout``. The first site is used again as soon as its cool-down is
over and it answers, as before.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence

from dataq.addresses import host_port_text
from dataq.config.feed_settings import parse_target
from dataq.errors import DataqError
from dataq.handshake import Greeting, PeerBook

from .link import Check, Compose, LinkLost, SiteLink

COOL_DOWN = 0.5
"""Seconds a next site that could not be reached is skipped by hand-ons after its first failure."""
COOL_DOWN_CAP = 10.0
"""The longest it is skipped while it stays away."""


class NextSites:
    """The links to ``sites`` (``host:port`` each, as ``next_sites`` writes them)."""

    def __init__(self, sites: Sequence[str], *, tls: ssl.SSLContext | None, timeout: float, peers: PeerBook,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sites, self.timeout, self.peers, self._clock = tuple(sites), timeout, peers, clock
        self._links: dict[str, SiteLink] = {}
        for site in self.sites:
            host, port = parse_target(site)
            self._links[site] = SiteLink(host, port, tls=tls, timeout=timeout, peer=peers[host_port_text(host, port)])

    def link(self, site: str) -> SiteLink:
        return self._links[site]

    async def offer(self, compose: Compose, check: Check | None = None) -> tuple[str, bytes, Greeting] | str:
        """One round over the sites, in order: the site that answered the request (one answer line, which
        ``check`` passed), the answer and what the site said in its handshake; or why none did."""
        reasons = []
        for site in self.sites:
            link = self._links[site]
            wait = self._cooling(site)
            if wait is not None:
                reasons.append(f"{site}: {link.last_error} (tried again in {wait:.1f} s)")
                continue
            try:
                async with asyncio.timeout(2 * self.timeout):
                    (answer,), greeting = await link.request(compose, 1, check)
            except TimeoutError:
                reasons.append(f"{site}: no answer within {2 * self.timeout:g} s")
                continue
            except LinkLost as exc:
                reasons.append(str(exc))
                continue
            except DataqError as exc:  # a certificate refused, or a peer breaking the protocol: the next one
                reasons.append(f"{site}: {exc}")
                continue
            return site, answer, greeting
        return "; ".join(reasons)

    async def ask(self, site: str, compose: Compose, answers: int, within: float,
                  check: Check | None = None) -> list[bytes]:
        """``site``'s ``answers`` answer lines to the lines ``compose`` makes. LinkLost if it cannot be reached
        or does not answer within ``within`` seconds; what ``compose`` raises."""
        link = self._links[site]
        if self._cooling(site) is not None:
            raise LinkLost(f"{site}: {link.last_error}")
        try:
            async with asyncio.timeout(within):
                lines, _ = await link.request(compose, answers, check)
        except TimeoutError:
            raise LinkLost(f"{site} did not answer within {within:g} s") from None
        return lines

    def _cooling(self, site: str) -> float | None:
        """Seconds ``site`` is still skipped for, if it is."""
        link = self._links[site]
        failures, failed_at = link.failed_connects, link.failed_at
        if not failures or failed_at is None:
            return None
        left = failed_at + min(COOL_DOWN_CAP, COOL_DOWN * 2 ** min(failures - 1, 16)) - self._clock()
        return left if left > 0 else None

    async def close(self) -> None:
        await asyncio.gather(*(link.close() for link in self._links.values()))
