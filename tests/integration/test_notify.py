"""E-mail notices delivered to a real SMTP server (aiosmtpd on loopback): content, digests, outages, TLS, login."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiosmtpd.smtp import AuthResult, LoginPassword
from click.testing import CliRunner
from structlog.testing import capture_logs

from dataq.cli.main import main
from dataq.config import MailSettings
from dataq.embedded.redis_server import free_port
from dataq.logs import HANDLER_NAME_PREFIX
from dataq.ops.mail import MailNotifier
from dataq.ops.notices import (
    KIND_CRASHED,
    KIND_INACTIVE,
    KIND_READ_OFF,
    KIND_REDIS_BACK,
    KIND_REDIS_DOWN,
    KIND_SYSTEMIC,
    Notice,
    crashed_notice,
    inactive_records_notice,
    read_off_notice,
    redis_back_notice,
    redis_down_notice,
    systemic_notice,
)
from dataq.ops.watches import FailureWatch
from tests.mail_support import WAIT, SmtpSink
from tests.push_support import Certs, make_certs

RECIPIENTS = ("ops@example.org", "oncall@example.org")


def one_inactive(record_id: str, path: str = "/a", error: str = "e", *, max_errors: int = 0) -> Notice:
    """What a pop daemon's settlement posts for one record moved to the inactive queue."""
    return inactive_records_notice("transfer", "host:1:pop:abc", max_errors,
                                   [{"id": record_id, "path": path, "size": 1, "last_error": error}])


def mail_settings(port: int, **overrides: Any) -> MailSettings:
    return MailSettings(**{"enabled": True, "host": "127.0.0.1", "port": port, "recipients": RECIPIENTS,
                           "sender": "dataq@test.example", **overrides})


def body(message: EmailMessage) -> str:
    part = message.get_body(("plain",))
    assert part is not None
    content = part.get_content()
    assert isinstance(content, str)
    return content


def count_of(message: EmailMessage) -> int:
    return int(message["X-Dataq-Count"])


async def test_each_kind_of_notice_is_mailed_at_once_with_its_content(smtp: SmtpSink) -> None:
    notifier = MailNotifier(mail_settings(smtp.controller.port), "transfer")
    notifier.start()
    notices = [
        one_inactive("f45cc4c647913bc6e22df280c733758e", "/data/night1/img_0001.fits", "rsync: connection refused",
                 max_errors=3),
        systemic_notice("transfer", 101, 600, {"rsync: connection refused": 101},
                        [{"id": "aa", "error": "rsync: connection refused"}]),
        read_off_notice("transfer", 1_000_000, 1_000_000, None),
        redis_down_notice("transfer", 75, "Error 111 connecting to 127.0.0.1:6399"),
        crashed_notice("dataq-pop@transfer.service", "exit-code", "exited", "1"),
    ]
    for notice in notices:
        notifier.post(notice)
    mails = {mail["X-Dataq-Kind"]: mail for mail in await smtp.wait_for(len(notices))}
    assert await notifier.close()

    assert set(mails) == {KIND_INACTIVE, KIND_SYSTEMIC, KIND_READ_OFF, KIND_REDIS_DOWN, KIND_CRASHED}
    for mail in mails.values():
        assert mail["From"] == "dataq@test.example"
        assert mail["To"] == ", ".join(RECIPIENTS)
        assert mail["X-Dataq-Queue"] == "transfer"
        # (strip: Python's header folding may move a subject of 70-77 characters to a continuation line)
        assert mail["Subject"].strip().startswith("[dataq ") and "/transfer] " in mail["Subject"]
    assert smtp.envelopes[0] == ("dataq@test.example", list(RECIPIENTS))

    inactive = body(mails[KIND_INACTIVE])
    assert "1 record(s) of queue transfer moved to the inactive queue after more than 3 failure(s)" in \
        mails[KIND_INACTIVE]["Subject"]
    for expected in ("id: f45cc4c647913bc6e22df280c733758e", "path: /data/night1/img_0001.fits",
                     "last error: rsync: connection refused",
                     "retry: dataq-cli --queue transfer --activate f45cc4c647913bc6e22df280c733758e "
                     "f45cc4c647913bc6e22df280c733758e"):
        assert expected in inactive
    systemic = body(mails[KIND_SYSTEMIC])
    assert "101 action failures within 600 s" in mails[KIND_SYSTEMIC]["Subject"]
    assert "101 x rsync: connection refused" in systemic and "dataq-cli --queue transfer --redo" in systemic
    read_off = body(mails[KIND_READ_OFF])
    assert "re enable: dataq-cli --queue transfer --read on" in read_off
    assert "only by hand" in read_off
    assert "Redis unreachable for 75 s" in mails[KIND_REDIS_DOWN]["Subject"]
    assert "Error 111" in body(mails[KIND_REDIS_DOWN])
    crashed = body(mails[KIND_CRASHED])
    assert "dataq-pop@transfer.service stopped by a crash (exit-code)" in mails[KIND_CRASHED]["Subject"]
    assert "journalctl -u dataq-pop@transfer.service" in crashed and "exit status: 1" in crashed


async def test_a_burst_of_1000_failures_is_a_handful_of_mails_with_counts_and_examples(smtp: SmtpSink) -> None:
    settings = mail_settings(smtp.controller.port, interval=1.0, examples=5, systemic_failures=100)
    notifier = MailNotifier(settings, "transfer")
    notifier.start()
    watch = FailureWatch.from_settings(notifier, "transfer", settings)
    for n in range(1000):
        record_id = f"{n:032x}"
        notifier.post(one_inactive(record_id, f"/data/f{n}", "disk full"))
        watch.failed(record_id, "disk full")
        if n % 50 == 0:
            await asyncio.sleep(0)  # let the sender run during the burst, as a daemon's loop would
    await smtp.eventually(lambda messages: sum(count_of(m) for m in messages if m["X-Dataq-Kind"] == KIND_INACTIVE)
                          == 1000)
    assert await notifier.close()

    inactive = [m for m in smtp.messages if m["X-Dataq-Kind"] == KIND_INACTIVE]
    systemic = [m for m in smtp.messages if m["X-Dataq-Kind"] == KIND_SYSTEMIC]
    assert len(smtp.messages) <= 5
    assert len(systemic) == 1
    assert "101 action failures" in systemic[0]["Subject"]
    digest = max(inactive, key=count_of)  # the one folding the most notices
    text = body(digest)
    assert f"{count_of(digest)} notices of kind 'inactive'" in text
    assert text.count("--- ") == 5 and f"--- 5 of {count_of(digest)}," in text
    assert text.count("retry: dataq-cli --queue transfer --activate ") == 5
    assert f"{count_of(digest)} inactive notices, the first: 1 record(s) " in digest["Subject"]


async def sent(notifier: MailNotifier, count: int) -> None:
    """Wait until the notifier counts ``count`` mails sent (the server has one before its sender knows)."""
    async with asyncio.timeout(WAIT):
        while notifier.sent < count:
            await asyncio.sleep(0.01)


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_mails_of_one_kind_wait_for_the_interval_but_other_kinds_do_not(smtp: SmtpSink) -> None:
    clock = Clock()
    notifier = MailNotifier(mail_settings(smtp.controller.port, interval=600), "transfer", clock=clock)
    notifier.start()
    notifier.post(one_inactive("a" * 32, "/a", "e"))
    await smtp.wait_for(1)
    notifier.post(one_inactive("b" * 32, "/b", "e"))  # within the interval: held
    notifier.post(redis_down_notice("transfer", 61, "refused"))  # another kind: goes at once
    await sent(notifier, 2)
    assert notifier.pending == 1
    clock.now += 599
    notifier.post(redis_back_notice("transfer", 62))  # wakes the sender: the inactive one is still held
    await sent(notifier, 3)
    assert notifier.pending == 1
    clock.now += 1
    notifier.post(crashed_notice("dataq-pop@transfer.service"))
    await sent(notifier, 5)
    assert await notifier.close()
    kinds = [m["X-Dataq-Kind"] for m in smtp.messages]
    assert kinds[:3] == [KIND_INACTIVE, KIND_REDIS_DOWN, KIND_REDIS_BACK]
    assert sorted(kinds[3:]) == sorted([KIND_INACTIVE, KIND_CRASHED])
    assert "/b" in body(smtp.messages[kinds.index(KIND_INACTIVE, 1)])


async def test_posting_never_waits_for_the_mail_server() -> None:
    """A server that accepts connections and never answers: posting returns before any conversation starts."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen()
        hung.setblocking(False)
        notifier = MailNotifier(mail_settings(hung.getsockname()[1], timeout=0.2), "transfer", retry_initial=60)
        notifier.start()
        for n in range(20):
            notifier.post(one_inactive(f"{n:032x}", f"/f{n}", "e"))
        assert notifier.pending == 20
        with pytest.raises(BlockingIOError):
            hung.accept()  # the sender has not even connected yet: post only recorded the notices
        assert await notifier.close(within=0.5) is False  # the hung server never took them


async def test_smtp_down_then_up_delivers_after_a_retry() -> None:
    port = free_port()  # nothing listens here yet
    notifier = MailNotifier(mail_settings(port), "transfer", retry_initial=0.1, retry_cap=0.2)
    notifier.start()
    with capture_logs() as logs:
        for n in range(20):
            notifier.post(one_inactive(f"{n:032x}", f"/f{n}", "e"))
            await asyncio.sleep(0.02)  # spread over several failed attempts
        assert notifier.sent == 0 and notifier.pending == 20
        # Start the server once an attempt with all 20 has failed: an attempt still carrying fewer (the 20th
        # arrived while it was under way) could otherwise reach it first, and rightly send only those.
        deadline = time.monotonic() + 10
        while not any(entry["event"] == "cannot send mail; will retry" and entry["notices"] == 20 for entry in logs):
            assert time.monotonic() < deadline, "no attempt with all 20 notices failed"
            await asyncio.sleep(0.01)
        sink = SmtpSink(port).start()
        try:
            [mail] = await sink.wait_for(1)
            assert await notifier.close()
        finally:
            sink.stop()
    assert count_of(mail) == 20  # everything folded while the server was down, sent in one mail
    retries = [entry for entry in logs if entry["event"] == "cannot send mail; will retry"]
    assert retries and retries[0]["server"] == f"127.0.0.1:{port}"
    assert any(entry["event"] == "mail sent" for entry in logs)


async def test_close_sends_the_pending_digest_without_waiting_for_the_interval(smtp: SmtpSink) -> None:
    notifier = MailNotifier(mail_settings(smtp.controller.port, interval=3600), "transfer")
    notifier.start()
    notifier.post(one_inactive("a" * 32, "/a", "e"))
    await smtp.wait_for(1)
    for n in range(3):
        notifier.post(one_inactive(f"{n:032x}", "/b", "e"))
    assert await notifier.close(within=WAIT)
    assert [count_of(m) for m in smtp.messages] == [1, 3]


async def test_close_gives_up_within_its_time_when_smtp_stays_down() -> None:
    notifier = MailNotifier(mail_settings(free_port()), "transfer", retry_initial=0.05, retry_cap=0.1)
    notifier.start()
    notifier.post(one_inactive("a" * 32, "/a", "e"))
    assert await notifier.close(within=0.5) is False
    assert notifier.pending == 1


# --- TLS and login --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("smtp-certs"))


def authenticator(server: object, session: object, envelope: object, mechanism: str, auth_data: Any) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (b"dataq", b"s3cret")
    return AuthResult(success=ok, handled=False)


@pytest.mark.parametrize(
    "security",
    [
        "starttls",
        # aiosmtpd offers AUTH over implicit TLS only when told TLS is not required, and then warns about it.
        pytest.param("tls", marks=pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")),
    ],
)
async def test_mail_goes_over_tls_with_a_login_whose_password_comes_from_a_file(
    security: str, certs: Certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(certs.server_cert, certs.server_key)
    options: dict[str, Any] = {"authenticator": authenticator, "auth_required": True}
    options.update({"tls_context": server_tls, "require_starttls": True} if security == "starttls"
                   else {"ssl_context": server_tls, "auth_require_tls": False})
    sink = SmtpSink(free_port(), **options).start()
    monkeypatch.setenv("SSL_CERT_FILE", certs.ca)  # the client trusts the test CA as a system CA
    (tmp_path / "pw").write_text("s3cret\n")
    try:
        settings = mail_settings(sink.controller.port, security=security, username="dataq",
                                 password_file=str(tmp_path / "pw"))
        notifier = MailNotifier(settings, "transfer")
        notifier.start()
        notifier.post(one_inactive("a" * 32, "/a", "e"))
        [mail] = await sink.wait_for(1)
        assert await notifier.close()
    finally:
        sink.stop()
    assert mail["X-Dataq-Kind"] == KIND_INACTIVE


# --- dataq notify-crash (the units' OnFailure= hook) ----------------------------------------------------------


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """notify-crash configures logging for its process; put the test process's back."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    for handler in list(root.handlers):
        if handler not in handlers and (handler.get_name() or "").startswith(HANDLER_NAME_PREFIX):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    structlog.reset_defaults()


def write_config(tmp_path: Path, port: int, enabled: bool = True) -> str:
    path = tmp_path / "dataq.toml"
    path.write_text(f'[mail]\nenabled = {str(enabled).lower()}\nhost = "127.0.0.1"\nport = {port}\n'
                    f'recipients = ["ops@example.org"]\n', encoding="utf-8")
    return str(path)


MONITOR = {"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "exited", "MONITOR_EXIT_STATUS": "1",
           "HOME": "/nonexistent"}


def notify_crash(*args: str) -> int:
    """``dataq notify-crash ARGS`` in-process, with the variables systemd gives an OnFailure= unit."""
    result = CliRunner().invoke(main, ["notify-crash", *args], env=MONITOR)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code


@pytest.mark.usefixtures("restore_logging")
def test_notify_crash_mails_the_crashed_notice_of_the_failed_unit(smtp: SmtpSink, tmp_path: Path) -> None:
    assert notify_crash("--config", write_config(tmp_path, smtp.controller.port), "dataq-pop@transfer") == 0
    [mail] = smtp.messages
    assert mail["X-Dataq-Kind"] == KIND_CRASHED
    assert mail["X-Dataq-Queue"] == "transfer"
    assert "dataq-pop@transfer.service stopped by a crash (exit-code)" in mail["Subject"]
    assert "exit code: exited" in body(mail)


@pytest.mark.usefixtures("restore_logging")
def test_notify_crash_with_mail_disabled_sends_nothing_and_succeeds(smtp: SmtpSink, tmp_path: Path) -> None:
    config = write_config(tmp_path, smtp.controller.port, enabled=False)
    assert notify_crash("--config", config, "dataq-pop@transfer") == 0
    assert smtp.messages == []


@pytest.mark.usefixtures("restore_logging")
def test_notify_crash_reports_a_mail_it_could_not_deliver(tmp_path: Path) -> None:
    assert notify_crash("--config", write_config(tmp_path, free_port()), "--timeout", "0.3", "dataq-push@transfer") == 1


def test_notify_crash_with_bad_settings_exits_with_the_configuration_status(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[mail]\nenabled = true\n")
    assert notify_crash("--config", str(tmp_path / "bad.toml"), "dataq-pop@transfer") == 3


def test_notify_crash_refuses_a_timeout_that_is_not_a_positive_number(tmp_path: Path) -> None:
    assert notify_crash("--timeout", "-1", "dataq-pop@transfer") == 2


async def test_a_mail_that_cannot_be_built_is_kept_and_the_sender_goes_on(
    smtp: SmtpSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    notifier = MailNotifier(mail_settings(smtp.controller.port), "transfer", retry_initial=0.01, retry_cap=0.02)
    real_build = MailNotifier.build_message
    attempts: list[str] = []

    def broken_once(self: MailNotifier, digest: Any) -> EmailMessage:
        attempts.append(digest.kind)
        if len(attempts) == 1:
            raise KeyError("a bug in a notice's details")
        return real_build(self, digest)

    monkeypatch.setattr(MailNotifier, "build_message", broken_once)
    notifier.start()
    notifier.post(one_inactive("a" * 32, "/a", "e"))
    [mail] = await smtp.wait_for(1)
    assert await notifier.close()
    assert attempts == [KIND_INACTIVE, KIND_INACTIVE] and count_of(mail) == 1


async def test_an_unreachable_destination_and_its_return_are_mailed_at_once_each(smtp: SmtpSink) -> None:
    from dataq.ops.notices import KIND_REACHABLE, KIND_UNREACHABLE, reachable_notice, unreachable_notice

    notifier = MailNotifier(mail_settings(smtp.controller.port), "transfer")
    notifier.start()
    notifier.post(unreachable_notice("transfer", "vm:1:pop:ab", "rsync://valley/data", "exit status 10"))
    notifier.post(reachable_notice("transfer", "vm:1:pop:ab", "rsync://valley/data", 3725.0))
    mails = {mail["X-Dataq-Kind"]: mail for mail in await smtp.wait_for(2)}
    assert await notifier.close()
    assert "rsync://valley/data is unreachable; its records wait" in mails[KIND_UNREACHABLE]["Subject"]
    assert "last error: exit status 10" in body(mails[KIND_UNREACHABLE])
    assert "dataq-cli --queue transfer --summary" in body(mails[KIND_UNREACHABLE])
    assert "reachable again after 3725 s" in mails[KIND_REACHABLE]["Subject"]
