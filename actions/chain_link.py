"""How a site asks its next sites about records (audit questions, ``dataq-cli --trace``'s receipts): the way
``network_move`` hands its records on (its next sites, its TLS or mutual TLS, its timeout), so that the questions
reach what the records reached."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from dataq.actions.move_options import DEFAULT_HANDON_TIMEOUT
from dataq.actions.network_move import NetworkMoveAction
from dataq.actions.registry import options_of
from dataq.audit.chain import MAX_HOPS, ArrivedAsk, Ask, arrived_asker, asker
from dataq.config import QueueSettings, Settings
from dataq.feed.link import client_tls_context
from dataq.handshake import PeerBook


@dataclass(frozen=True, slots=True)
class ChainLink:
    """A queue's link to its next sites."""

    site: str
    next_sites: tuple[str, ...] = ()
    tls: ssl.SSLContext | None = None
    timeout: float = DEFAULT_HANDON_TIMEOUT
    peers: PeerBook = field(default_factory=PeerBook)

    def asker(self, forward: int = MAX_HOPS - 2, within: float | None = None) -> Ask:
        """How this site asks its next sites: to pass each question on ``forward`` sites further, waiting
        ``within`` seconds (None: as :func:`~dataq.audit.chain.asker` says)."""
        return asker(self.site, self.tls, self.timeout, self.peers, forward=forward, within=within)

    def arrived_asker(self) -> ArrivedAsk:
        """How this site asks the end of its chain which records it holds (:mod:`dataq.audit.arrived`)."""
        return arrived_asker(self.site, self.tls, self.timeout, self.peers)


def chain_link(settings: Settings, queue: QueueSettings) -> ChainLink:
    """The link of ``queue``'s records to its next sites (none where it hands nothing on); ConfigError if its
    ``network_move`` options are wrong."""
    move = options_of(queue, NetworkMoveAction, settings.source)
    if move is None:
        return ChainLink(settings.site)
    tls = client_tls_context(move.handon_tls_ca, move.handon_tls_cert, move.handon_tls_key) \
        if move.handon_tls else None
    return ChainLink(settings.site, tuple(move.next_sites), tls, move.handon_timeout)
