"""dataq-cli on a queue with activities: pushing into one, listing, summing up, asking why, dumping and loading
them back, and the refusals an operator may meet."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from dataq.store import QueueStore
from tests.cli_support import QUEUE, cli_with, on_store
from tests.helpers import make_records

Cli = Callable[..., Result]
POP = "host-1:4242:pop:abc123"


@pytest.fixture
def cli(tmp_path: Path, redis_url: str) -> Cli:
    path = tmp_path / "dataq.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n[redis]\nurl = "{redis_url}"\n'
                    f'[log]\ndir = "{tmp_path / "log"}"\n[queues.{QUEUE}]\n'
                    f'[queues.{QUEUE}.activities.express]\nmatch = ["*/calib/*"]\nstrict = true\n'
                    f'[queues.{QUEUE}.activities.backfill]\nshare = 1\n')
    return cli_with(path)


def pushstr(index: int, calib: bool = False) -> str:
    record = make_records(1, index)[0]
    path = record.path.replace("/mtn/", "/mtn/calib/") if calib else record.path
    return f"{path} {record.checksum} {record.size}"


def test_records_pushed_into_an_activity_list_with_it_and_the_summary_counts_each(cli: Cli,
                                                                                 redis_url: str) -> None:
    assert cli("--pushstr", pushstr(0), "--pushstr", pushstr(1), "--activity", "backfill").exit_code == 0
    assert cli("--pushstr", pushstr(2, calib=True), "--pushstr", pushstr(3)).exit_code == 0
    listing = cli("--list", "active").stdout.splitlines()
    assert [line.rsplit(", activity=", 1)[1] for line in listing] == ["express", "default", "backfill", "backfill"]
    assert listing[0] == f"{pushstr(2, calib=True).split()[1]} : path={pushstr(2, calib=True).split()[0]}, " \
                         f"size={pushstr(2, calib=True).split()[2]}, activity=express"
    doc = json.loads(cli("--json", "--summary").stdout)
    assert {name: (a["active"], a["done"]) for name, a in doc["activities"].items()} == {
        "express": (1, 0), "default": (1, 0), "backfill": (2, 0)}
    assert doc["activities"]["backfill"]["eta_seconds"] is None  # no pop daemon: unknown, and why
    assert "no pop daemon" in doc["activities"]["backfill"]["eta"]["why"]
    text = cli("--summary").stdout
    assert "  activity backfill: 2 queued, 0 done; eta unknown: no pop daemon of the queue is running" in text


def test_why_counts_the_records_ahead_in_its_activity_and_those_served_before_it(cli: Cli, redis_url: str) -> None:
    cli("--pushstr", pushstr(0), "--pushstr", pushstr(1), "--activity", "backfill")
    cli("--pushstr", pushstr(2, calib=True), "--pushstr", pushstr(3, calib=True))

    async def beat(store: QueueStore) -> None:
        await store.heartbeat(POP, {"role": "pop", "host": "host-1", "pid": 4242}, {"running": 0}, 30.0)

    on_store(redis_url, beat)
    second = pushstr(1).split()[1]
    line = cli("--why", second).stdout.strip()
    assert line == (f"{second}: queued: 1 record ahead of it in activity backfill (and 2 queued in activities "
                    "served before it) (place 2 of 2 in run order); it runs when they have")
    doc = json.loads(cli("--json", "--why", second).stdout)
    assert (doc["code"], doc["activity"], doc["before"], doc["ahead"]) == ("queued", "backfill", 2, 1)


def test_a_dump_keeps_each_records_activity_and_a_load_queues_it_there_again(cli: Cli, tmp_path: Path) -> None:
    cli("--pushstr", pushstr(0), "--activity", "backfill")
    cli("--pushstr", pushstr(1, calib=True), "--pushstr", pushstr(2))
    dump = tmp_path / "active.dump"
    assert cli("--dump", str(dump)).exit_code == 0
    before = cli("--list", "active").stdout
    assert cli("--clear").exit_code == 0
    assert cli("--load", str(dump)).exit_code == 0
    assert cli("--list", "active").stdout == before
    # A load may put every record into one activity instead.
    cli("--clear")
    assert cli("--load", str(dump), "--activity", "backfill").exit_code == 0
    assert {line.rsplit("=", 1)[1] for line in cli("--list", "active").stdout.splitlines()} == {"backfill"}


def test_an_unknown_activity_and_a_range_across_two_activities_are_refused_saying_why(cli: Cli) -> None:
    refused = cli("--pushstr", pushstr(0), "--activity", "urgent")
    assert refused.exit_code == 2
    assert "--activity: unknown activity 'urgent'; this queue's activities are: backfill, default, express" \
        in refused.stderr
    assert cli("--activity", "backfill").exit_code == 2
    cli("--pushstr", pushstr(0), "--activity", "backfill")
    cli("--pushstr", pushstr(1))
    first, last = pushstr(0).split()[1], pushstr(1).split()[1]
    moved = cli("--advance", first, last)
    assert moved.exit_code == 1
    assert f"{first} is queued in activity backfill and {last} in activity default" in moved.stderr


def test_a_load_with_activity_takes_lines_naming_activities_this_queue_lacks(cli: Cli, tmp_path: Path) -> None:
    record = make_records(1, 7)[0]
    dump = tmp_path / "other.dump"
    dump.write_text(json.dumps({"path": record.path, "checksum": record.checksum, "size": record.size,
                                "activity": "nightly"}) + "\n")
    refused = cli("--load", str(dump))
    assert refused.exit_code == 1 and "unknown activity 'nightly'" in refused.stderr
    assert cli("--load", str(dump), "--activity", "backfill").exit_code == 0
    assert cli("--list", "active").stdout.strip().endswith(", activity=backfill")
