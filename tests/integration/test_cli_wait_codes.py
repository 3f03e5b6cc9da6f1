"""dataq-cli --why against a real Redis: each reason a record is not done yet comes from the situation that leads to
it, in one line with its next step, and as a code with its fields under --json."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from dataq.store import CustodyEntry, Flag, QueueStore, RetryPolicy
from tests.cli_support import QUEUE, on_store, seed

Cli = Callable[..., Result]
POP = "host-1:4242:pop:abc123"
MAX_ERRORS = 3


@pytest.fixture
def config(tmp_path: Path, redis_url: str) -> Path:
    """The queue retries a record three times before it goes inactive."""
    path = tmp_path / "dataq.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n[redis]\nurl = "{redis_url}"\n'
                    f'[log]\ndir = "{tmp_path / "log"}"\n[queues.{QUEUE}]\nmax_errors = {MAX_ERRORS}\n')
    return path


def pop_alive(redis_url: str, **stats: object) -> None:
    """A pop daemon of the queue with a fresh heartbeat (``stats``: what it reports, e.g. its outages)."""
    async def beat(store: QueueStore) -> None:
        await store.heartbeat(POP, {"role": "pop", "host": "host-1", "pid": 4242}, {"running": 0, **stats}, 30.0)

    on_store(redis_url, beat)


def why(cli: Cli, record_id: str) -> tuple[str, dict[str, object]]:
    """The line --why prints, and its --json document."""
    text = cli("--why", record_id)
    doc = cli("--json", "--why", record_id)
    assert text.exit_code == doc.exit_code, (text.output, doc.output)
    document = json.loads(doc.stdout)
    assert (document["switch"], document["id"]) == ("why", record_id)
    return text.stdout.strip(), document


def test_a_queued_record_says_how_many_are_ahead_of_it(cli: Cli, redis_url: str) -> None:
    records = seed(redis_url, 5)
    pop_alive(redis_url)
    line, doc = why(cli, records[3].checksum)
    assert line == (f"{records[3].checksum}: queued: 3 records ahead of it (place 4 of 5 in run order); it runs when "
                    "they have")
    assert (doc["code"], doc["ahead"], doc["place"], doc["active"]) == ("queued", 3, 4, 5)


def test_a_queued_record_of_a_paused_queue_says_how_to_resume_it(cli: Cli, redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    pop_alive(redis_url)
    on_store(redis_url, lambda store: store.set_flag(Flag.ACTION, False))
    line, doc = why(cli, record.checksum)
    assert doc["code"] == "paused" and line.endswith("to run them: dataq-cli --action on")


def test_a_queued_record_without_a_pop_daemon_says_to_start_one(cli: Cli, redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    line, doc = why(cli, record.checksum)
    assert doc["code"] == "no_worker" and "no pop daemon of the queue is running" in line


def test_a_queued_record_behind_an_unreachable_destination_says_when_it_is_probed_next(
        cli: Cli, redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    since = time.time() - 120
    pop_alive(redis_url, unreachable=[{"destination": "rsync://valley/incoming", "since": since,
                                       "error": "connection refused", "probes": 3, "next_probe_in": 30.0}])
    line, doc = why(cli, record.checksum)
    assert doc["code"] == "unreachable" and doc["destination"] == "rsync://valley/incoming"
    assert doc["since"] == since and isinstance(doc["next_probe"], float) and doc["next_probe"] > time.time()
    assert "unreachable since" in line and "(connection refused); the next probe at" in line


def test_a_claimed_record_says_which_worker_runs_it_and_since_when(cli: Cli, redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    pop_alive(redis_url)
    on_store(redis_url, lambda store: store.claim(POP, 1))
    line, doc = why(cli, record.checksum)
    assert (doc["code"], doc["worker"]) == ("running", POP)
    assert isinstance(doc["since"], float) and line.startswith(f"{record.checksum}: running: on {POP} since")


def test_a_failed_record_backs_off_until_its_retry_with_its_error(cli: Cli, redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    pop_alive(redis_url)

    async def fail(store: QueueStore) -> None:
        await store.claim(POP, 1)
        await store.fail(POP, [(record.checksum, "rsync: connection reset")], max_errors=MAX_ERRORS,
                         retry=RetryPolicy(delay=600.0, jitter=0.0))

    on_store(redis_url, fail)
    line, doc = why(cli, record.checksum)
    assert (doc["code"], doc["errors"], doc["error"]) == ("backing_off", 1, "rsync: connection reset")
    assert isinstance(doc["until"], float) and doc["until"] > time.time() + 500
    assert f"after failure 1 of {MAX_ERRORS}: rsync: connection reset; it runs again then" in line


def test_an_inactive_record_says_its_last_error_and_how_to_run_it_again(cli: Cli, redis_url: str) -> None:
    (record,) = seed(redis_url, 1)

    async def fail(store: QueueStore) -> None:
        for _ in range(MAX_ERRORS + 1):
            await store.claim(POP, 1)
            await store.fail(POP, [(record.checksum, "disk full")], max_errors=MAX_ERRORS)

    pop_alive(redis_url)
    on_store(redis_url, fail)
    line, doc = why(cli, record.checksum)
    assert (doc["code"], doc["errors"], doc["error"]) == ("inactive", MAX_ERRORS + 1, "disk full")
    assert line.endswith(f"to run it again: dataq-cli --activate {record.checksum} {record.checksum} "
                         "(every inactive record: --redo)")


def test_a_record_handed_on_waits_in_custody_for_the_next_site(cli: Cli, redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    pop_alive(redis_url)
    handed = time.time() - 5

    async def hand_on(store: QueueStore) -> None:
        claim = await store.claim(POP, 1)
        await store.keep([CustodyEntry(claim.records[0], "valley:9100", handed)], first_ask=handed)
        await store.ack(POP, [(record.checksum, "")])

    on_store(redis_url, hand_on)
    line, doc = why(cli, record.checksum)
    assert (doc["code"], doc["site"]) == ("custody", "valley:9100")
    assert "handed on to valley:9100 at" in line and "(last heard: nothing yet)" in line


def test_a_done_record_and_a_lost_one_say_so_and_an_unknown_id_fails(cli: Cli, redis_url: str) -> None:
    done, lost = seed(redis_url, 2)
    pop_alive(redis_url)

    async def finish(store: QueueStore) -> None:
        await store.claim(POP, 2)
        await store.ack(POP, [(done.checksum, ""), (lost.checksum, "")])
        await store.mark_lost([(lost.checksum, "missing_copy: gone from the archive")])

    on_store(redis_url, finish)
    line, doc = why(cli, done.checksum)
    assert doc["code"] == "done" and isinstance(doc["at"], float) and line.startswith(f"{done.checksum}: done: at")
    line, doc = why(cli, lost.checksum)
    assert (doc["code"], doc["why"]) == ("lost", "missing_copy: gone from the archive")
    assert "to send it again: dataq audit --repair DIR" in line
    unknown = cli("--why", "f" * 32)
    assert unknown.exit_code == 1 and ": unknown: this site does not know it" in unknown.stdout


def test_an_id_that_is_no_checksum_is_refused_before_redis_is_asked(cli: Cli) -> None:
    result = cli("--why", "not-an-md5")
    assert result.exit_code != 0 and "--why" in result.output


def test_the_summary_says_when_the_backlog_will_be_done_or_why_it_cannot(cli: Cli, redis_url: str) -> None:
    records = seed(redis_url, 12)
    pop_alive(redis_url)
    assert "  eta:       unknown: no rate yet: nothing done in the last 300 s" in cli("--summary").stdout

    async def run_two(store: QueueStore) -> None:
        claim = await store.claim(POP, 2)
        await store.ack(POP, [(record.id, "") for record in claim.records])

    on_store(redis_url, run_two)
    doc = json.loads(cli("--json", "--summary").stdout)
    eta = doc["eta"]
    assert (eta["backlog"], eta["unknown"]) == (10, None)
    # Seconds are given to a tenth, the rate to a thousandth: a quick run's ETA of a second or so differs by more
    # than 1 % from the figure reckoned back from the rounded rate.
    assert doc["eta_seconds"] == eta["seconds"] == pytest.approx(10 / eta["done_per_minute"] * 60, rel=0.01,
                                                                 abs=0.05)
    on_store(redis_url, lambda store: store.set_flag(Flag.ACTION, False))
    doc = json.loads(cli("--json", "--summary").stdout)
    assert (doc["eta_seconds"], doc["eta"]["unknown"]) == (None, "paused")
    assert len(records) == 12


def test_a_queued_record_behind_a_destination_outside_its_windows_says_when_it_opens(
        cli: Cli, redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    opens = time.time() + 3600
    pop_alive(redis_url, outside_window=[{"destination": "rsync://valley/incoming", "windows": "19:00-07:00",
                                          "opens": opens}])
    line, doc = why(cli, record.checksum)
    assert (doc["code"], doc["destination"], doc["windows"], doc["opens"]) == (
        "outside_window", "rsync://valley/incoming", "19:00-07:00", opens)
    assert "is used only in its windows (19:00-07:00): claiming starts again at" in line
    summary = json.loads(cli("--json", "--summary").stdout)
    assert (summary["eta_seconds"], summary["eta"]["unknown"]) == (None, "outside_window")
