"""E-mail delivery of notices: rate limited and digested per kind, sent in the background, retried until sent.

:meth:`MailNotifier.post` only records the notice and returns: it never waits for the network and never
raises. A background task sends (:meth:`MailNotifier.run`, supervised by the daemon). The first notice of a kind
goes out at once; the notices of that kind that follow within ``mail.interval`` seconds are folded into one
digest (how many, and the first ``mail.examples`` in full), sent when the interval is over. So a burst of a
thousand failures costs a handful of mails, and memory per kind stays bounded however long the burst lasts. An
SMTP server that is down or refuses is logged and retried with capped backoff; the notices wait (folded)
meanwhile.

SMTP is aiosmtplib's: a conversation on the event loop, bounded by ``mail.timeout`` and cancelled like any
other coroutine, so a hung server can delay neither the daemon's work nor its exit (the standard library's
smtplib would need a thread of its own, which a stuck socket keeps alive).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

import aiosmtplib

from dataq.config import MailSettings
from dataq.errors import ConfigError
from dataq.logs import get_logger
from dataq.ops.notices import Notice, one_line, render_text
from dataq.runtime.backoff import Backoff
from dataq.runtime.supervise import cancel_and_wait

RETRY_INITIAL = 5.0
"""Seconds before the first retry of a failed mail (a relay restarting is back within seconds)."""
RETRY_CAP = 300.0
"""Longest wait between two retries, so a mail server that comes back is used within five minutes."""
CLOSE_TIMEOUT = 10.0
"""Seconds :meth:`MailNotifier.close` spends sending what is pending before giving up on it."""
CREDENTIALS_ENV = "CREDENTIALS_DIRECTORY"
"""Where systemd puts the files of ``LoadCredential=``; a relative ``password_file`` is looked up there."""

log = get_logger()


def read_password(settings: MailSettings, environ: Mapping[str, str] | None = None) -> str | None:
    """The SMTP password from ``password_env`` or ``password_file`` (None without ``username``).

    Raises ConfigError naming the variable or file when it is missing or unreadable, so that a daemon fails at
    start-up rather than at the first incident.
    """
    env = os.environ if environ is None else environ
    if settings.username is None:
        return None
    if settings.password_env is not None:
        if settings.password_env not in env:
            raise ConfigError(f"mail.password_env names the environment variable {settings.password_env}, "
                              "which is not set")
        return env[settings.password_env]
    assert settings.password_file is not None  # the settings require one source with a username
    path = settings.password_file
    if not os.path.isabs(path):
        directory = env.get(CREDENTIALS_ENV)
        if not directory:
            raise ConfigError(f"mail.password_file {path!r} is relative, which names a systemd credential, but "
                              f"${CREDENTIALS_ENV} is not set (add LoadCredential={path}:FILE to the unit)")
        path = os.path.join(directory, path)
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"mail.password_file: cannot read {path}: {exc.strerror or exc}") from exc


async def send_message(settings: MailSettings, password: str | None, message: EmailMessage) -> None:
    """One SMTP conversation: connect, TLS as configured, log in if configured, send; within ``mail.timeout``."""
    tls = settings.security != "none"
    async with asyncio.timeout(settings.timeout):
        refused, _ = await aiosmtplib.send(
            message,
            hostname=settings.host,
            port=settings.port,
            use_tls=settings.security == "tls",
            # "none" means plain SMTP, even if the server offers STARTTLS (aiosmtplib would upgrade by default).
            start_tls=settings.security == "starttls",
            tls_context=ssl.create_default_context() if tls else None,
            username=settings.username if password is not None else None,
            password=password,
            timeout=settings.timeout,
        )
    if refused:
        log.warning("mail server refused some recipients", refused=sorted(refused))


@dataclass
class Digest:
    """The notices of one kind waiting to be mailed: how many, and the first few in full."""

    kind: str
    count: int = 0
    examples: list[tuple[float, Notice]] = field(default_factory=list)
    """(wall-clock time, notice) of the first notices folded in."""
    last_at: float = 0.0

    def add(self, notice: Notice, at: float, keep: int) -> None:
        self.count += 1
        self.last_at = at
        if len(self.examples) < keep:
            self.examples.append((at, notice))

    def absorb(self, newer: Digest, keep: int) -> None:
        """Fold the notices that arrived while this digest was being sent (and failed) into it."""
        self.count += newer.count
        self.last_at = max(self.last_at, newer.last_at)
        self.examples = (self.examples + newer.examples)[:keep]


class MailNotifier:
    """Mails notices to ``settings.recipients``; one mail per kind per ``settings.interval``, digests between.

    A :class:`dataq.ops.notices.Notifier`. The sending loop is :meth:`run`: a daemon runs it under its supervisor,
    a short-lived process (``dataq notify-crash``) with :meth:`start`. :meth:`close` on shutdown sends what is
    pending, whatever the interval, within its timeout. ``queue`` (None for suite-wide notices) and the host name
    go into each subject, so one mailbox can serve many hosts.
    """

    def __init__(self, settings: MailSettings, queue: str | None, *, environ: Mapping[str, str] | None = None,
                 retry_initial: float = RETRY_INITIAL, retry_cap: float = RETRY_CAP,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock`` measures the intervals between mails (a test moves one by hand)."""
        self.settings, self.queue, self._clock = settings, queue, clock
        self._password = read_password(settings, environ)
        self._backoff = Backoff(retry_initial, retry_cap)
        self._hostname = socket.gethostname()
        self._pending: dict[str, Digest] = {}
        self._sending: Digest | None = None
        self._last_sent: dict[str, float] = {}
        """Kind -> monotonic time its last mail was sent."""
        self._retry_at = -math.inf
        self._wake = asyncio.Event()
        self._running = False
        self._finished = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.sent = 0
        """Mails sent so far (for tests and the log)."""

    def start(self) -> None:
        """Run :meth:`run` as a task of its own, for a process without a supervisor; :meth:`close` ends it."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="mail-notifier")

    def post(self, notice: Notice) -> None:
        """Record a notice for mailing; returns at once and never raises."""
        try:
            if self._closing:
                log.warning("notice after the mail notifier closed; not mailed", kind=notice.kind,
                            subject=notice.subject)
                return
            digest = self._pending.get(notice.kind)
            if digest is None:
                digest = self._pending[notice.kind] = Digest(notice.kind)
            digest.add(notice, time.time(), self.settings.examples)
            self._wake.set()
        except Exception:  # a notice must never fail the work that raised it
            log.exception("notice not recorded for mailing", kind=notice.kind, subject=notice.subject)

    @property
    def pending(self) -> int:
        """Notices recorded but not yet mailed (including those of a mail being sent)."""
        sending = self._sending.count if self._sending is not None else 0
        return sending + sum(digest.count for digest in self._pending.values())

    async def close(self, within: float = CLOSE_TIMEOUT) -> bool:
        """Send what is pending, whatever the interval, within ``within`` seconds; True if nothing was left.

        The sending loop ends once nothing is pending; a task of :meth:`start` still sending is cancelled.
        """
        self._closing = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:  # our own (start): it may not have begun running yet
            await asyncio.wait({task}, timeout=within)
            if not task.done():
                await cancel_and_wait([task])
        elif self._running:  # a supervisor's task: it ends by itself once nothing is pending
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within):
                    await self._finished.wait()
        if self.pending:
            log.error("mail notifier closed with notices unsent", pending=self.pending, kinds=sorted(self._pending))
            return False
        return True

    def _due(self, now: float) -> str | None:
        if now < self._retry_at:
            return None
        for kind in self._pending:
            if self._closing or now >= self._last_sent.get(kind, -math.inf) + self.settings.interval:
                return kind
        return None

    def _next_wake(self, now: float) -> float | None:
        if not self._pending:
            return None
        earliest = min(self._last_sent.get(kind, -math.inf) + self.settings.interval for kind in self._pending)
        return max(earliest, self._retry_at) - now

    async def run(self) -> None:
        """Send what is due, until :meth:`close` and nothing is left (or until cancelled)."""
        self._running = True
        self._finished.clear()
        try:
            while True:
                kind = self._due(self._clock())
                if kind is not None:
                    await self._deliver(self._pending.pop(kind))
                    continue
                if self._closing and not self._pending:
                    return
                self._wake.clear()
                delay = self._next_wake(self._clock())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(None if delay is None else max(0.0, delay)):
                        await self._wake.wait()
        finally:
            self._running = False
            self._finished.set()

    async def _deliver(self, digest: Digest) -> None:
        self._sending = digest
        try:
            message = self.build_message(digest)
            await send_message(self.settings, self._password, message)
        except asyncio.CancelledError:
            self._put_back(digest)  # close() gave up waiting: count these as unsent
            raise
        except (OSError, TimeoutError, aiosmtplib.SMTPException) as exc:
            self._retry_later(digest)
            log.warning("cannot send mail; will retry", kind=digest.kind, notices=digest.count,
                        server=f"{self.settings.host}:{self.settings.port}", error=str(exc) or type(exc).__name__,
                        retry_in=round(self._retry_at - self._clock(), 1))
            return
        except Exception:
            # A notice must never stop the work that raised it: the daemon goes on, the notices wait (logged).
            self._retry_later(digest)
            log.exception("mail not sent: a bug in building or sending it; will retry", kind=digest.kind,
                          notices=digest.count)
            return
        finally:
            self._sending = None
        self._backoff.reset()
        self._retry_at = -math.inf
        self._last_sent[digest.kind] = self._clock()
        self.sent += 1
        log.info("mail sent", kind=digest.kind, notices=digest.count, subject=message["Subject"])

    def _retry_later(self, digest: Digest) -> None:
        self._retry_at = self._clock() + self._backoff.next_delay()
        self._put_back(digest)

    def _put_back(self, digest: Digest) -> None:
        newer = self._pending.pop(digest.kind, None)
        if newer is not None:
            digest.absorb(newer, self.settings.examples)
        self._pending[digest.kind] = digest

    def build_message(self, digest: Digest) -> EmailMessage:
        """The mail for ``digest``: the notice itself when alone, else the count and the first examples."""
        where = f"{self._hostname}/{self.queue}" if self.queue else self._hostname
        first_at, first = digest.examples[0]
        message = EmailMessage()
        if digest.count == 1:
            subject = first.subject
            body = f"{first.subject}\n\n{render_text(first.kind, first.details)}\n\nat: {_iso(first_at)}\n"
        else:
            subject = f"{digest.count} {digest.kind} notices, the first: {first.subject}"
            parts = [f"{digest.count} notices of kind {digest.kind!r} from {_iso(first_at)} to "
                     f"{_iso(digest.last_at)}; the first {len(digest.examples)} follow."]
            for index, (at, notice) in enumerate(digest.examples, start=1):
                parts.append(f"--- {index} of {digest.count}, at {_iso(at)} ---\n{notice.subject}\n\n"
                             f"{render_text(notice.kind, notice.details)}")
            body = "\n\n".join(parts) + "\n"
        body += (f"\n-- \ndataq on {self._hostname}: at most one mail of kind {digest.kind!r} every "
                 f"{self.settings.interval:g} s; the notices in between come folded into one digest.\n")
        message["Subject"] = one_line(f"[dataq {where}] {subject}")
        message["From"] = self.settings.sender
        message["To"] = ", ".join(self.settings.recipients)
        message["Date"] = formatdate(localtime=True)
        message["Message-ID"] = make_msgid("dataq", domain=self._hostname or "localhost")
        message["X-Dataq-Kind"] = digest.kind
        message["X-Dataq-Count"] = str(digest.count)
        if self.queue:
            message["X-Dataq-Queue"] = self.queue
        message.set_content(body)
        return message


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
