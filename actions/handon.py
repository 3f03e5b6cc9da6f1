"""``network_move``'s hand-on: the record of a verified transfer, pushed to the next site's push daemons over
kept, pipelined connections (:mod:`dataq.nextsite`), over TLS or mutual TLS when configured.

Without a spool, each hand-on is one round over the next sites: the first that answers within ``timeout`` takes
it, an ``Error:`` reply fails the record, and no site answering is an outage of the next sites (``Retryable``).
The hand-ons of a batch travel together on one connection per next site, which the custody keeper's receipts
queries share. With a spool, a hand-on is kept in it (fsynced) and succeeds at once, and a sender running beside
the pop daemon's workers (a :class:`~dataq.feed.forward.Forwarder`) sends the spool to the next sites for as long
as they stay away: the next site's outage then holds up nothing at this one.
"""

from __future__ import annotations

import asyncio
import ssl

from dataq.checksum import DEFAULT_ALGORITHM
from dataq.config.feed_settings import parse_target
from dataq.errors import ActionError, DataqError, ProtocolError, Retryable
from dataq.feed.client import client_tls_context
from dataq.feed.forward import Forwarder, forward_until_stopped
from dataq.feed.intake import entry_of
from dataq.feed.spool import Spool
from dataq.handshake import Capability, Greeting, PeerBook
from dataq.logs import get_logger
from dataq.nextsite import NextSites
from dataq.protocol import Reply, ReplyKind, parse_reply
from dataq.record import Record, form_for, handon_line
from dataq.runtime.backoff import Backoff
from dataq.runtime.supervise import cancel_and_wait

SENDER_RESTART_CAP = 60.0
"""Longest wait before a failed hand-on sender starts again."""

log = get_logger()


def parse_site(site: str) -> tuple[str, int]:
    """(host, port) of a ``host:port`` next site (``[v6-address]:port`` too); ValueError if malformed."""
    try:
        return parse_target(site)
    except ValueError as exc:
        raise ValueError(f"next site {exc}") from None


class HandOn:
    """Hands records on to ``sites`` (``host:port``, tried in order); see the module's docstring."""

    def __init__(self, sites: tuple[str, ...], *, timeout: float, spool: str | None,
                 tls: tuple[str | None, str | None, str | None], site: str = "",
                 algorithm: str = DEFAULT_ALGORITHM) -> None:
        self.sites, self.timeout, self.spool_dir, self.tls_files = sites, timeout, spool, tls
        self.site, self.algorithm = site, algorithm
        """This site's name and its records' checksum algorithm, carried with each hand-on (a next site that
        does not speak them gets the hand-on without them: :func:`~dataq.record.form_for`)."""
        self.peers = PeerBook()
        """What each next site said in its last handshake (the custody keeper's receipts queries learn it too)."""
        self._tls: ssl.SSLContext | None = None
        self.next_sites: NextSites | None = None
        """The kept links to the next sites (after :meth:`start`), shared with the custody keeper's receipts."""
        self._spool: Spool | None = None
        self._forwarder: Forwarder | None = None
        self._sending: asyncio.Task[None] | None = None
        self._stop_sending = asyncio.Event()
        self._closed = False

    async def start(self) -> None:
        """Load the TLS files and open the spool: a mistake in either stops the pop daemon at start-up."""
        ca, cert, key = self.tls_files
        try:
            if ca is not None or cert is not None:
                self._tls = client_tls_context(ca, cert, key)
            if self.spool_dir is not None:
                self._spool = await Spool(self.spool_dir).open()
        except DataqError as exc:
            raise ActionError(f"network_move: {exc}") from exc
        self._open_links()
        if self._spool is not None:
            self._forwarder = self._new_forwarder(self._spool)
            self._sending = asyncio.create_task(self._send(self._spool), name="hand-on sender")
            self._sending.add_done_callback(_report_sender_end)

    def _open_links(self) -> NextSites:
        self.next_sites = NextSites(self.sites, tls=self._tls, timeout=self.timeout, peers=self.peers)
        return self.next_sites

    def _new_forwarder(self, spool: Spool) -> Forwarder:
        return Forwarder(spool, [parse_site(site) for site in self.sites], tls=self._tls, timeout=self.timeout,
                         peers=self.peers)

    async def _send(self, spool: Spool) -> None:
        """Send the spool until stopped; a sender that fails (a next site breaking the protocol, the spool's disk
        failing) is started again after a while: the records wait in the spool meanwhile."""
        backoff = Backoff(initial=1.0, cap=SENDER_RESTART_CAP)
        while not self._stop_sending.is_set():
            assert self._forwarder is not None
            try:
                await forward_until_stopped(self._forwarder, self._stop_sending, self.timeout)
                return
            except DataqError as exc:
                log.error("the hand-on sender failed; starting it again", error=str(exc))
            await backoff.wait(self._stop_sending)
            self._forwarder = self._new_forwarder(spool)

    async def close(self, grace: float) -> None:
        """Stop the sender (what it has in flight gets ``grace`` seconds to be answered) and close the spool."""
        if self._sending is not None:
            self._stop_sending.set()
            _, running = await asyncio.wait({self._sending}, timeout=grace + self.timeout)
            await cancel_and_wait(list(running))
        # Each let go of once (a second close does nothing).
        self._closed = True
        spool, self._spool, next_sites, self.next_sites = self._spool, None, self.next_sites, None
        if spool is not None:
            await spool.close()
        if next_sites is not None:
            await next_sites.close()

    @property
    def tls(self) -> ssl.SSLContext | None:
        """The TLS context of the links to the next sites (after :meth:`start`)."""
        return self._tls

    async def spooled(self, ids: list[str]) -> set[str]:
        """Those of ``ids`` the hand-on spool still holds (not sent yet, or refused): none without a spool."""
        if self._spool is None or not ids:
            return set()
        return await self._spool.holding(ids)

    async def __call__(self, record: Record, path: str) -> str:
        """Hand ``record`` on as ``path``; the next site that took it (``""``: kept in the spool). ActionError if
        a next site refuses it, Retryable if none answers."""
        handed = Record(path=path, checksum=record.checksum, size=record.size, again=record.again,
                        activity=record.activity)
        if self._spool is not None and self._forwarder is not None:
            await self._keep(record, handed)
            return ""
        # Sent in the form the next site speaks (its handshake), with the other hand-ons of its batch.
        outcome = await self._offer(handon_line(handed, self.site, self.algorithm), handed.checksum)
        if isinstance(outcome, str):
            # Every site unreachable or silent: an outage of the next sites, not a fault of the record.
            raise Retryable(f"no next site took the record: {outcome}",
                            destination=f"next sites {', '.join(self.sites)}")
        site, reply, greeting = outcome
        if reply.asks_to_resend:
            # Its writes were not confirmed by enough replicas within ``timeout``: an outage there, not a refusal.
            raise Retryable(f"next site {site} could not confirm the record in time: {reply.detail}",
                            destination=f"next sites {', '.join(self.sites)}")
        if reply.kind is ReplyKind.ERROR and self.algorithm != DEFAULT_ALGORITHM \
                and not greeting.speaks(Capability.ALGORITHM):
            # Such a site knows md5 checksums only: the record must not be taken as one, and was refused.
            raise ActionError(f"next site {site} does not speak checksum algorithms ({greeting.describe()}): it "
                              f"cannot take {self.algorithm} checksums (its reply: {reply.detail})")
        if reply.kind is ReplyKind.ERROR:
            raise ActionError(f"next site {site} refused the record: {reply.detail}")
        if handed.again and reply.kind is ReplyKind.IGNORED and not greeting.speaks(Capability.AGAIN):
            # The mark was taken out for a site that does not know it: it ignored the record as done already.
            raise ActionError(f"next site {site} does not speak 'again' ({greeting.describe()}): it ignored the "
                              "record sent again as done already; upgrade it, or push it there with dataq-cli --again")
        log.info("handed on", id=record.id, site=site, path=path, reply=str(reply))
        return site

    async def _offer(self, line: str, checksum: str) -> tuple[str, Reply, Greeting] | str:
        """One round over the sites: the site that answered (as ``next_sites`` writes it), its reply and what it
        said in the handshake, or why none did. A reply asking to send the record again (a next site whose
        writes too few replicas confirmed) is followed for ``timeout`` seconds."""
        if self._closed:
            return "the hand-on is closed (its pop daemon is stopping)"
        next_sites = self.next_sites or self._open_links()  # run before start(), as a test may: no TLS files
        data = (line + "\n").encode("utf-8", "surrogateescape")

        def compose(greeting: Greeting) -> bytes:
            # In the form the next site speaks (its handshake).
            return data if greeting.full else form_for(data, greeting.capabilities)

        def check(answer: list[bytes]) -> None:
            # A Pushed or Ignored answer names the record it answers: another's means the connection's answers
            # are out of step with its records (and it is dropped before any other is taken).
            reply = parse_reply(answer[0])
            if reply.ok and reply.detail.lower() != checksum.lower():
                raise ProtocolError(f"the answer {str(reply)!r} names another record than {checksum}")

        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            outcome = await next_sites.offer(compose, check)
            if isinstance(outcome, str):
                return outcome
            site, answer, greeting = outcome
            try:
                reply = parse_reply(answer)
            except ProtocolError as exc:  # not an answer of the push protocol: as if it had not answered
                return f"{site}: {exc}"
            if not reply.asks_to_resend or asyncio.get_running_loop().time() >= deadline:
                return site, reply, greeting
            await asyncio.sleep(0.1)

    async def _keep(self, record: Record, handed: Record) -> None:
        assert self._spool is not None and self._forwarder is not None
        if self._sending is not None and self._sending.done():  # a bug, logged: run the record again later
            raise Retryable("the hand-on sender has stopped (see the pop daemon's log)",
                            destination=f"spool {self._spool.directory}")
        try:
            # The forwarder sends it in the form the next site speaks (its handshake).
            line = handon_line(handed, self.site, self.algorithm) + "\n"
            entry = entry_of(handed)._replace(line=line.encode("utf-8", "surrogateescape"))
            await self._spool.add([entry])
        except DataqError as exc:  # a full disk, a damaged spool: the record runs again later
            raise Retryable(f"cannot keep the hand-on: {exc}", destination=f"spool {self._spool.directory}") from exc
        self._forwarder.wake()
        log.info("handed on (spooled)", id=record.id, path=handed.path, spool=self._spool.directory)


def _report_sender_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("the hand-on sender stopped; records wait in its spool", error=str(error))
