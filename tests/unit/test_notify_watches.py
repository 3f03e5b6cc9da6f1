"""Notice builders and detectors: what each notice says, when a failure burst is systemic, when Redis is down."""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import pytest

from dataq.config import MailSettings
from dataq.errors import ConfigError
from dataq.ops.crash import notice_from_environment, queue_of_unit
from dataq.ops.mail import read_password
from dataq.ops.notices import (
    KIND_INACTIVE,
    KIND_REDIS_BACK,
    KIND_REDIS_DOWN,
    KIND_SYSTEMIC,
    activate_command,
    inactive_records_notice,
    render_text,
)
from dataq.ops.watches import FailureWatch, RedisDownWatch
from tests.pop_support import RecordingNotifier as Recorder

# --- builders -------------------------------------------------------------------------------------------------


def test_activate_command_is_the_exact_cli_call_and_quotes_what_needs_it() -> None:
    assert activate_command("transfer", "abc") == "dataq-cli --queue transfer --activate abc abc"
    assert shlex.split(activate_command("q", "a b", "c")) == ["dataq-cli", "--queue", "q", "--activate", "a b", "c"]


def test_an_inactive_notice_names_each_record_and_the_command_that_retries_it() -> None:
    kind, subject, details = inactive_records_notice(
        "transfer", "host:1:pop:abc", 3, [{"id": "f45cc4c6", "path": "/data/a.fits", "last_error": "host unreachable"}])
    assert kind == KIND_INACTIVE
    assert subject == "1 record(s) of queue transfer moved to the inactive queue after more than 3 failure(s)"
    text = render_text(kind, details)
    for expected in ("id: f45cc4c6", "path: /data/a.fits", "last error: host unreachable",
                     "retry: dataq-cli --queue transfer --activate f45cc4c6 f45cc4c6"):
        assert expected in text


def test_an_inactive_notice_listing_records_gets_a_retry_command_per_record() -> None:
    details = {"queue": "transfer", "reason": "failures",
               "records": [{"id": "aa", "path": "/x", "last_error": "boom"}, {"id": "bb", "path": "/y"}]}
    text = render_text(KIND_INACTIVE, details)
    assert "retry: dataq-cli --queue transfer --activate aa aa" in text
    assert "retry: dataq-cli --queue transfer --activate bb bb" in text


def test_an_inactive_notice_without_ids_says_how_to_list_them() -> None:
    text = render_text(KIND_INACTIVE, {"queue": "transfer", "reason": "crashes", "count": 3})
    assert "dataq-cli --queue transfer --list inactive" in text


def test_a_long_detail_is_cut_in_the_mail() -> None:
    text = render_text(KIND_INACTIVE, {"queue": "q", "last_error": "x" * 10_000})
    assert len(text) < 2_200
    assert "more characters" in text


@pytest.mark.parametrize(
    ("unit", "queue"),
    [("dataq-pop@transfer.service", "transfer"), ("dataq-push@a.b\\x2dc", "a.b-c"), ("dataq-redis.service", None)],
)
def test_the_queue_of_a_unit_is_its_instance_name(unit: str, queue: str | None) -> None:
    assert queue_of_unit(unit) == queue


def test_crashed_notice_carries_what_systemd_told_the_failure_hook() -> None:
    _, subject, details = notice_from_environment(
        "dataq-pop@transfer",
        {"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "exited", "MONITOR_EXIT_STATUS": "1",
         "MONITOR_INVOCATION_ID": "0123abcd"},
    )
    assert subject == "dataq-pop@transfer.service stopped by a crash (exit-code)"
    assert details["exit_status"] == "1"
    assert details["log"] == "journalctl _SYSTEMD_INVOCATION_ID=0123abcd"


# --- FailureWatch ---------------------------------------------------------------------------------------------


def test_failures_up_to_the_threshold_are_not_systemic() -> None:
    watch = FailureWatch(Recorder(), "transfer", threshold=100, window=600)
    assert all(watch.record(f"id{n}", "timeout", now=1000 + n) is None for n in range(100))


def test_one_failure_over_the_threshold_within_the_window_gives_one_systemic_notice() -> None:
    watch = FailureWatch(Recorder(), "transfer", threshold=100, window=600, examples=3)
    notices = [watch.record(f"id{n}", "timeout" if n % 2 else "disk full", now=1000 + n) for n in range(300)]
    fired = [notice for notice in notices if notice is not None]
    assert len(fired) == 1
    kind, _, details = fired[0]
    assert kind == KIND_SYSTEMIC
    assert details["failures"] == 101
    assert details["errors_by_message"] == ["51 x disk full", "50 x timeout"]
    assert details["samples"] == [{"id": "id0", "error": "disk full"}, {"id": "id1", "error": "timeout"},
                                  {"id": "id2", "error": "disk full"}]
    assert "--action off" in str(details["pause"]) and "--redo" in str(details["after_the_fix"])


def test_failures_spread_wider_than_the_window_are_not_systemic() -> None:
    watch = FailureWatch(Recorder(), "transfer", threshold=10, window=60)
    assert all(watch.record(f"id{n}", "e", now=n * 7.0) is None for n in range(100))  # ~9 per minute


def test_a_lasting_incident_gives_one_notice_per_window() -> None:
    watch = FailureWatch(Recorder(), "transfer", threshold=10, window=60)
    fired = [n for n in range(600) if watch.record(f"id{n}", "e", now=n * 0.5) is not None]  # 2/s for 300 s
    assert len(fired) == 5
    assert all(b - a == 120 for a, b in itertools.pairwise(fired))  # 60 s apart


def test_many_distinct_errors_are_counted_without_growing_without_bound() -> None:
    watch = FailureWatch(Recorder(), "transfer", threshold=1000, window=60)
    notice = None
    for n in range(1001):
        notice = watch.record(f"id{n}", f"error number {n}", now=10.0) or notice
    assert notice is not None
    by_message = notice.details["errors_by_message"]
    assert isinstance(by_message, list) and len(by_message) == 21
    assert "981 x (other errors)" in by_message


def test_failed_hands_the_systemic_notice_to_the_notifier() -> None:
    recorder = Recorder()
    watch = FailureWatch.from_settings(recorder, "transfer", MailSettings(systemic_failures=3))
    for n in range(10):
        watch.failed(f"id{n}", "no route to host")
    assert [kind for kind, _, _ in recorder.notices] == [KIND_SYSTEMIC]


# --- RedisDownWatch -------------------------------------------------------------------------------------------


def test_redis_down_shorter_than_the_threshold_gives_no_notice() -> None:
    watch = RedisDownWatch(Recorder(), "transfer", threshold=60)
    assert watch.on_unavailable("refused", now=0) is None
    assert watch.on_unavailable("refused", now=59) is None
    assert watch.on_available(now=59.5) is None
    assert watch.on_unavailable("refused", now=100) is None  # a new outage starts its own clock


def test_redis_down_longer_than_the_threshold_gives_one_notice_then_one_on_return() -> None:
    watch = RedisDownWatch(Recorder(), "transfer", threshold=60)
    results = [watch.on_unavailable("connection refused", now=t) for t in range(0, 200, 5)]
    down = [notice for notice in results if notice is not None]
    assert len(down) == 1
    assert down[0].kind == KIND_REDIS_DOWN
    assert down[0].details["last_error"] == "connection refused"
    back = watch.on_available(now=300)
    assert back is not None and back.kind == KIND_REDIS_BACK
    assert back.details["down_for_seconds"] == 300
    assert watch.on_available(now=301) is None


def test_redis_watch_notifies_through_the_notifier() -> None:
    recorder = Recorder()
    watch = RedisDownWatch(recorder, None, threshold=0)
    watch.unavailable("refused")
    watch.unavailable("refused")
    watch.available()
    assert [kind for kind, _, _ in recorder.notices] == [KIND_REDIS_DOWN, KIND_REDIS_BACK]


# --- the SMTP password ----------------------------------------------------------------------------------------


def test_password_comes_from_the_named_environment_variable() -> None:
    mail = MailSettings(username="dq", password_env="SMTP_PW")
    assert read_password(mail, {"SMTP_PW": "s3cret"}) == "s3cret"
    with pytest.raises(ConfigError, match="SMTP_PW, which is not set"):
        read_password(mail, {})


def test_password_comes_from_a_file_or_a_systemd_credential(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("from-file\n")
    assert read_password(MailSettings(username="dq", password_file=str(tmp_path / "pw")), {}) == "from-file"
    credential = MailSettings(username="dq", password_file="pw")
    assert read_password(credential, {"CREDENTIALS_DIRECTORY": str(tmp_path)}) == "from-file"
    with pytest.raises(ConfigError, match="CREDENTIALS_DIRECTORY"):
        read_password(credential, {})
    with pytest.raises(ConfigError, match="cannot read"):
        read_password(MailSettings(username="dq", password_file=str(tmp_path / "missing")), {})


def test_no_username_means_no_password() -> None:
    assert read_password(MailSettings(), {}) is None
