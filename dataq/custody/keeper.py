"""``network_move``'s custody keeper: asks the next sites for receipts about the records this site handed on, and
acts on the answers (see ``docs/custody.md``).

Each round takes the custody entries due (:meth:`~dataq.store.custody.CustodyOps.custody_due`), asks the site
each went to (records sent from the hand-on spool: every next site, the best answer winning; those still in the
spool are not asked), and takes a step with every answer, all in one atomic call per round:

* ``done``: with ``remove_source = "after_receipt"`` the source is deleted first (only if it is still the file
  that was sent), then the record leaves custody. A crash in between asks again, and deletes nothing twice;
* ``pending``: kept, with where the record is, and asked about again after ``receipt_interval``;
* ``unknown``: once ``resend_after`` seconds have passed since the hand-on, the record goes back to this site's
  queue and runs again (transfer, verify, hand-on to the first next site that answers); before, it is asked about
  again (the hand-on may still be on its way);
* no answer (the next site is down, or refuses connections): an outage, not a loss: nothing is resent, the
  entries are asked about again later;
* a push daemon whose handshake does not name receipts (a dataq older than 0.2, or the 2014 data-q): logged once,
  and its records stay in custody (their sources are never deleted by ``after_receipt``); they are asked about
  again every :data:`NO_RECEIPTS_ASK_INTERVAL` at least, over a new connection whose handshake tells at once when
  the site has been upgraded.

Records in custody longer than ``receipt_alarm`` seconds make a notice (one per ``receipt_alarm``, at most one an
hour).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from dataq.addresses import host_port_text
from dataq.config.feed_settings import parse_target
from dataq.custody.client import ReceiptsNotSpoken, ask, ask_over
from dataq.custody.receipts import Receipt, ReceiptKind
from dataq.errors import DataqError
from dataq.handshake import Capability, PeerBook
from dataq.logs import get_logger
from dataq.nextsite import NextSites
from dataq.ops.notices import LogNotifier, Notifier, receipt_overdue_notice
from dataq.runtime.supervise import cancel_and_wait
from dataq.store.custody import CustodyEntry, CustodyStep, LastAnswer
from dataq.store.custody_codes import Step
from dataq.store.facets import CustodyFacet

_RANK = {ReceiptKind.DONE: 3, ReceiptKind.PENDING: 2, ReceiptKind.UNKNOWN: 0}
"""Which answer wins when several next sites are asked about one record (any other kind, an error, ranks 1)."""
DUE_PER_ROUND = 1000
"""Custody entries one round asks about at most."""
NO_RECEIPTS_ASK_INTERVAL = 60.0
"""Seconds at least between two questions to a next site that does not speak receipts: each is a connection it
answers with a refusal, logged there (its hand-ons, one connection each, still see an upgrade at once)."""
ALARM_EXAMPLES = 5
"""Records an overdue-receipt notice names."""
ALARM_MIN_INTERVAL = 3600.0
"""Seconds between two overdue-receipt notices at least (the mail digest folds them further)."""

log = get_logger()

SourceCheck = Callable[[CustodyEntry], None]
"""Deletes a record's source if it is still the file that was sent (the action's, run in a thread)."""


@dataclass(frozen=True, slots=True)
class KeeperOptions:
    sites: tuple[str, ...]
    site: str
    """This site's name, sent with each query."""
    interval: float
    resend_after: float
    alarm: float
    timeout: float
    after_receipt: bool
    queue: str


class CustodyKeeper:
    """Runs beside a pop daemon's workers for a queue whose ``network_move`` hands records on."""

    def __init__(self, custody: CustodyFacet, options: KeeperOptions, *, tls: ssl.SSLContext | None,
                 remove_source: SourceCheck, notifier: Notifier | None,
                 spooled: Callable[[list[str]], Awaitable[set[str]]] | None = None,
                 peers: PeerBook | None = None, next_sites: NextSites | None = None) -> None:
        """``next_sites``: the hand-on's kept links, which the receipts queries then share (None: a connection
        per question)."""
        self.custody, self.options, self.tls = custody, options, tls
        self.next_sites = next_sites
        self.remove_source = remove_source
        self.spooled = spooled
        self.notifier = notifier or LogNotifier()
        self.peers = peers if peers is not None else PeerBook()
        """What each next site said in its last handshake (shared with the hand-on)."""
        self._warned: set[str] = set()
        """Next sites this keeper has logged as not speaking receipts (once each, until they do)."""
        self.down: dict[str, str] = {}
        """Next sites that did not answer, and why."""
        self._alarmed_at = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def no_receipts(self) -> dict[str, str]:
        """Next sites whose last handshake (a hand-on's or this keeper's) does not name receipts, and what it
        said: derived from :attr:`peers`, the one record of what each next site speaks."""
        found = {}
        for site in self.options.sites:
            greeting = self.peers[host_port_text(*parse_target(site))].greeting
            if greeting is not None and not greeting.speaks(Capability.RECEIPTS):
                found[site] = greeting.describe()
        return found

    def start(self, stop: asyncio.Event) -> None:
        self._task = asyncio.create_task(self._run(stop), name="custody keeper")

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])

    async def _run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                busy = await self.round()
            except DataqError as exc:  # Redis away: the custody waits in it
                log.warning("custody round failed; trying again", error=str(exc))
                busy = False
            except Exception:  # a bug: logged with its traceback; the custody waits in Redis meanwhile
                log.exception("custody round failed of a bug; trying again after a while")
                busy = False
            if busy:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.options.interval):
                    await stop.wait()

    async def round(self, now: float | None = None) -> bool:
        """Ask about the entries due and take a step with each; True if a full round was due (more may be)."""
        now = time.time() if now is None else now
        due = await self.custody.custody_due(DUE_PER_ROUND, now)
        by_site: dict[str, list[CustodyEntry]] = defaultdict(list)
        for entry in due:
            by_site[entry.site].append(entry)
        steps: list[CustodyStep] = []
        for site, entries in by_site.items():
            asked = entries
            if not site and self.spooled is not None:
                # Still in the hand-on spool: no next site can know it yet.
                held = await self.spooled([entry.record.id for entry in entries])
                steps += [CustodyStep(Step.ASK_LATER, entry, ask_at=now + self.options.interval)
                          for entry in entries if entry.record.id in held]
                asked = [entry for entry in entries if entry.record.id not in held]
            if asked:
                steps += await self._ask(site, asked, now)
        await self.custody.apply_steps(steps, self.options.resend_after, now)
        await self._check_alarm(now)
        return len(due) >= DUE_PER_ROUND

    async def _ask(self, site: str, entries: list[CustodyEntry], now: float) -> list[CustodyStep]:
        """Ask ``site`` about ``entries`` (``""``, records sent from the spool: every next site, as any of them
        may have taken them); the step of each."""
        options = self.options
        candidates = [site] if site else list(options.sites)
        answered: list[list[Receipt]] = []
        silent = []
        for candidate in candidates:
            receipts = await self._ask_one(candidate, [entry.record.id for entry in entries])
            if receipts is None:
                silent.append(candidate)
            else:
                answered.append(receipts)
        if not answered:
            wait = options.interval
            no_receipts = self.no_receipts
            if all(candidate in no_receipts for candidate in candidates):
                wait = max(wait, NO_RECEIPTS_ASK_INTERVAL)
            return [CustodyStep(Step.ASK_LATER, entry, ask_at=now + wait) for entry in entries]
        steps = []
        for index, entry in enumerate(entries):
            receipt = max((receipts[index] for receipts in answered), key=lambda r: _RANK.get(r.kind, 1))
            if receipt.kind is ReceiptKind.UNKNOWN and silent:
                # Another next site may hold it: not a loss until every one of them says so.
                steps.append(_kept(entry, receipt.last_answer(f"{', '.join(silent)} not answering"),
                                   now + options.interval))
            else:
                steps.append(await self._decide(entry, receipt, now))
        return steps

    async def _ask_one(self, candidate: str, ids: list[str]) -> list[Receipt] | None:
        """``candidate``'s answers about ``ids``; None if it cannot answer (down, or it does not speak receipts)."""
        host, port = parse_target(candidate)
        try:
            if self.next_sites is not None and candidate in self.next_sites.sites:
                receipts = await ask_over(self.next_sites, candidate, ids, site=self.options.site,
                                          within=self.options.timeout)
            else:
                receipts = await ask(host, port, ids, site=self.options.site, tls=self.tls,
                                     within=self.options.timeout, peer=self.peers[host_port_text(host, port)])
        except ReceiptsNotSpoken as exc:
            if candidate not in self._warned:
                self._warned.add(candidate)
                log.warning("the next site does not speak receipts: its records stay in custody and their sources "
                            "are kept", site=candidate, speaks=exc.greeting.describe(),
                            was="the next site does not understand receipts (an older dataq): its records stay in "
                                "custody and their sources are kept")
            return None
        except DataqError as exc:
            if candidate not in self.down:
                log.warning("cannot ask the next site for receipts; its records wait in custody",
                            site=candidate, error=str(exc))
            self.down[candidate] = str(exc)
            return None
        if candidate in self.down:
            log.info("the next site answers receipts again", site=candidate)
        self.down.pop(candidate, None)
        if candidate in self._warned:
            self._warned.discard(candidate)
            log.info("the next site speaks receipts now", site=candidate)
        return receipts

    async def _decide(self, entry: CustodyEntry, receipt: Receipt, now: float) -> CustodyStep:
        options = self.options
        if receipt.kind is ReceiptKind.DONE:
            if options.after_receipt:
                # Before the record leaves custody: a crash in between asks again, and the answer is done again.
                await asyncio.to_thread(self.remove_source, entry)
            return CustodyStep(Step.DONE, entry, end_at=receipt.at if receipt.at is not None else now)
        if receipt.kind is ReceiptKind.UNKNOWN and now - entry.handed_at >= options.resend_after:
            log.warning("the next site does not know a record handed on; sending it again", id=entry.record.id,
                        site=receipt.site, handed_on=entry.handed_at, resends=entry.resends + 1)
            return CustodyStep(Step.RESEND, entry, replacement=replace(
                entry, last=receipt.last_answer("resent"), resends=entry.resends + 1))
        if receipt.kind is ReceiptKind.REFUSED:
            log.warning("the next site refused a receipt query", id=entry.record.id, error=receipt.error)
        return _kept(entry, receipt.last_answer(), now + options.interval)

    async def _check_alarm(self, now: float) -> None:
        options = self.options
        if now - self._alarmed_at < max(options.alarm, ALARM_MIN_INTERVAL):
            return
        oldest = await self.custody.oldest_in_custody(ALARM_EXAMPLES)
        overdue = [entry for entry in oldest if now - entry.handed_at > options.alarm]
        if not overdue:
            return
        self._alarmed_at = now
        examples = [{"id": entry.record.id, "path": entry.record.path, "next site": entry.site or "(spool)",
                     "waiting": f"{now - entry.handed_at:.0f} s",
                     "last answer": entry.last.describe() if entry.last else "(none yet)"}
                    for entry in overdue]
        self.notifier.post(receipt_overdue_notice(options.queue, options.site, options.alarm,
                                                  now - overdue[0].handed_at, overdue[0].record.id, examples))


def remove_if_unchanged(entry: CustodyEntry) -> None:
    """Delete the record's source if it is still the file that was sent (same device, inode, size and times);
    a file put in its place since is left alone."""
    path = entry.record.path
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return  # deleted already (this step ran before a crash)
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if entry.identity is None or tuple(entry.identity) != identity:
        log.warning("not deleting a source: it is not the file that was sent", path=path, id=entry.record.id)
        return
    try:
        os.unlink(path)
    except OSError as exc:  # the custody still ends: the file is where the chain ends; this one stays behind
        log.error("cannot remove a source after its receipt; it stays", path=path, id=entry.record.id,
                  error=exc.strerror or str(exc))
        return
    log.info("source removed after its receipt", id=entry.record.id, path=path)


def _kept(entry: CustodyEntry, last: LastAnswer, ask_at: float) -> CustodyStep:
    """The entry kept with what the chain said last, and asked about again at ``ask_at``; only asked again if
    that is what it keeps already (no rewrite)."""
    if last == entry.last:
        return CustodyStep(Step.ASK_LATER, entry, ask_at=ask_at)
    return CustodyStep(Step.PENDING, entry, replacement=replace(entry, last=last), ask_at=ask_at)
