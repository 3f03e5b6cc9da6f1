"""The scheduled audit (``dataq audit --scheduled``, what dataq-audit.timer runs): it audits what ``[audit]`` says,
mails what it found to a real SMTP server, and its results reach the pop daemon's metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dataq.actions import storing
from dataq.cli.main import main
from dataq.ops.metrics import DaemonMetrics
from dataq.record import Record
from dataq.store import QueueStore
from tests.actions_support import empty_root, make_file
from tests.cli_support import on_store
from tests.mail_support import SmtpSink

QUEUE = "archive"
Audit = Callable[..., Result]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return empty_root(tmp_path)


@pytest.fixture
def audit(tmp_path: Path, redis_url: str, root: Path, smtp: SmtpSink) -> Audit:
    """``dataq audit`` at site "archive", whose queue stores under ``root``, mailing to ``smtp``."""
    config = tmp_path / "dataq.toml"
    config.write_text(
        f'site = "archive"\ndata_dir = "{tmp_path / "data"}"\n[redis]\nurl = "{redis_url}"\n'
        f'[mail]\nenabled = true\nhost = "127.0.0.1"\nport = {smtp.controller.port}\n'
        f'recipients = ["ops@example.org"]\n[audit]\nmax_repair = "25"\n'
        f'[queues.{QUEUE}]\nactions = ["disk_store"]\n'
        f'[queues.{QUEUE}.disk_store]\nroot = "{root}"\nlayout = "{{name}}"\n')

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, ["audit", "--config", str(config), *args])

    return run


def stored(tmp_path: Path, root: Path, redis_url: str, count: int) -> list[Record]:
    records = [make_file(tmp_path / "valley", f"{n}.fits", b"flat %d " % n * 100) for n in range(count)]
    storing.store_batch_sync([(r, Path(r.path).name) for r in records], str(root))

    async def done(store: QueueStore) -> None:
        await store.push_batch(records, source="valley")
        await store.heartbeat("pop", {"role": "pop"}, {"running": 0}, 30.0)
        claim = await store.claim("pop", count)
        assert all(await store.ack("pop", [(r.checksum, "") for r in claim.records]))

    on_store(redis_url, done, QUEUE)
    return records


def test_a_scheduled_audit_that_finds_something_mails_it_and_one_that_does_not_stays_quiet(
        tmp_path: Path, root: Path, redis_url: str, audit: Audit, smtp: SmtpSink) -> None:
    records = stored(tmp_path, root, redis_url, 12)
    clean = audit("--scheduled")
    assert clean.exit_code == 0, clean.output
    assert smtp.messages == []
    (root / "by-hand.fits").write_bytes(b"dropped in by an operator")
    dark = audit("--scheduled")
    assert dark.exit_code == 1 and smtp.messages == [], "a dark file is reported, not mailed every morning"

    (root / Path(records[0].path).name).unlink()
    found = audit("--scheduled")
    assert found.exit_code == 1
    (message,) = smtp.messages
    assert message["Subject"].endswith("dataq audit at archive: 1 file(s) found (missing_copy 1)")
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert records[0].checksum in text and "missing_copy" in text
    assert "dataq audit --config" in text and "--scheduled" in text, "says how to see them all"


def test_the_last_audit_of_each_root_reaches_the_pop_daemons_metrics(
        tmp_path: Path, root: Path, redis_url: str, audit: Audit) -> None:
    records = stored(tmp_path, root, redis_url, 12)
    (root / Path(records[0].path).name).unlink()
    assert audit("--scheduled").exit_code == 1

    async def families(store: QueueStore) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        metrics = DaemonMetrics(QUEUE, "pop", lambda: {})
        assert await metrics.refresh(store) is None
        return {(sample.name, frozenset(sample.labels.items())): sample.value
                for family in metrics.families() for sample in family.samples}

    samples = on_store(redis_url, families, QUEUE)
    target = f"copies:{root}"
    labels = {"queue": QUEUE, "target": target}
    assert samples[("dataq_audit_files", frozenset({**labels, "class": "missing_copy"}.items()))] == 1
    assert samples[("dataq_audit_files", frozenset({**labels, "class": "arrived"}.items()))] == 11
    assert samples[("dataq_audit_files", frozenset({**labels, "class": "lost"}.items()))] == 0
    assert samples[("dataq_audit_last_run_timestamp_seconds", frozenset(labels.items()))] > 1.7e9


def test_scheduled_takes_what_to_audit_from_the_settings_alone(audit: Audit) -> None:
    result = audit("--scheduled", "--copies")
    assert result.exit_code == 2 and "--scheduled takes what to audit from [audit]" in result.stderr
