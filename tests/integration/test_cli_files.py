"""dataq-cli --dump and --load (alias --push): record files in and out, streamed in constant memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from dataq.cli import files
from dataq.record import Record, format_line
from dataq.store import QueueList
from tests.cli_support import QUEUE, by_switch, ids, on_store, seed
from tests.helpers import make_records

Cli = Callable[..., Result]


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def write_lines(path: Path, records: list[Record]) -> Path:
    with path.open("w") as file:
        for record in records:
            file.write(format_line(record) + "\n")
    return path


# --- --dump --------------------------------------------------------------------------------------------------


def test_dump_writes_the_active_list_next_to_run_first(cli: Cli, redis_url: str, tmp_path: Path) -> None:
    records = seed(redis_url, 5)
    target = tmp_path / "queue.txt"
    assert ok(cli("--dump", str(target))).stdout == f"Dumped 5 records of the active list to {target}\n"
    assert target.read_text().splitlines() == [format_line(r) for r in records]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_dump_writes_the_list_target_inactive_or_every_record(cli: Cli, redis_url: str, tmp_path: Path) -> None:
    records = seed(redis_url, 5)
    on_store(redis_url, lambda s: s.deactivate(records[2].checksum, records[1].checksum))
    ok(cli("--list", "inactive", "--dump", str(tmp_path / "inactive.txt")))
    assert (tmp_path / "inactive.txt").read_text().splitlines() == [format_line(records[1]), format_line(records[2])]
    doc = by_switch(ok(cli("-l", "records", "--dump", str(tmp_path / "all.txt"), "--json")).stdout)["dump"]
    assert doc == {"switch": "dump", "queue": QUEUE, "file": str(tmp_path / "all.txt"), "list": "records", "records": 5}
    assert sorted((tmp_path / "all.txt").read_text().splitlines()) == sorted(format_line(r) for r in records)


def test_dump_replaces_an_existing_file_whole(cli: Cli, redis_url: str, tmp_path: Path) -> None:
    target = tmp_path / "queue.txt"
    target.write_text("old content\n" * 100)
    (record,) = seed(redis_url, 1)
    ok(cli("--dump", str(target)))
    assert target.read_text() == format_line(record) + "\n"


def test_dump_then_clear_then_load_restores_every_record(cli: Cli, redis_url: str, tmp_path: Path) -> None:
    records = seed(redis_url, 2500)
    target = tmp_path / "backup.txt"
    ok(cli("--dump", str(target)))
    ok(cli("--clear"))
    assert ok(cli("--load", str(target))).stdout == "Loaded 2500 records (0 duplicates ignored)\n"
    assert ids(redis_url, QueueList.ACTIVE) == [r.checksum for r in reversed(records)]  # the same run order
    (stored,) = on_store(redis_url, lambda s: s.list_records(QueueList.ACTIVE, 0, 1))
    assert stored.source == "load:backup.txt"


# --- --load / --push -----------------------------------------------------------------------------------------


def test_load_pushes_in_file_order_and_warns_for_each_duplicate(cli: Cli, redis_url: str, tmp_path: Path) -> None:
    old = seed(redis_url, 2)
    new = make_records(3, start=10)
    path = write_lines(tmp_path / "records.txt", [new[0], old[1], new[1], old[0], new[2]])
    result = ok(cli("--load", str(path)))
    assert result.stdout == "Loaded 3 records (2 duplicates ignored)\n"
    assert result.stderr.splitlines() == [
        f"Warning: ignored duplicate ID={old[1].checksum}",
        f"Warning: ignored duplicate ID={old[0].checksum}",
    ]
    # The first line of the file runs first, as if a feeder had sent the lines in order.
    assert ids(redis_url, QueueList.ACTIVE)[:3][::-1] == [new[0].checksum, new[1].checksum, new[2].checksum]


def test_load_names_only_the_first_duplicates_then_counts_the_rest(
    cli: Cli, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_DUPLICATE_WARNINGS", 3)
    records = seed(redis_url, 10)
    result = ok(cli("--load", str(write_lines(tmp_path / "again.txt", records))))
    assert result.stdout == "Loaded 0 records (10 duplicates ignored)\n"
    warnings = result.stderr.splitlines()
    assert warnings[:3] == [f"Warning: ignored duplicate ID={r.checksum}" for r in records[:3]]
    assert warnings[3:] == ["Warning: 7 more duplicates not named"]


def test_push_is_the_original_name_of_load_and_reads_stdin_as_dash(cli: Cli, redis_url: str) -> None:
    records = make_records(3)
    stdin = "".join(format_line(r) + "\n" for r in records)
    doc = by_switch(ok(cli("--push", "-", "--json", input=stdin)).stdout)["load"]
    assert doc == {"switch": "load", "queue": QUEUE, "file": "-", "loaded": 3, "duplicates": 0}
    (stored, *_) = on_store(redis_url, lambda s: s.list_records(QueueList.ACTIVE))
    assert stored.source == "load:stdin"


def test_load_skips_blank_lines_and_accepts_both_record_forms(cli: Cli, redis_url: str, tmp_path: Path) -> None:
    spaced, plain = make_records(2)
    path = tmp_path / "mixed.txt"
    json_line = f'{{"path": "/data/with space.fits", "checksum": "{spaced.checksum}", "size": 5}}'
    path.write_text(f"\n{json_line}\r\n\n   \n{format_line(plain)}\n")
    assert ok(cli("--load", str(path))).stdout == "Loaded 2 records (0 duplicates ignored)\n"
    assert {r.path for r in on_store(redis_url, lambda s: s.list_records(QueueList.ACTIVE))} == {
        "/data/with space.fits",
        plain.path,
    }


# --- progress -------------------------------------------------------------------------------------------------


class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("as_json", "stdout_tty", "stderr_tty", "shown"),
    [(False, True, True, True), (True, True, True, False), (False, False, True, False), (False, True, False, False)],
)
def test_progress_is_shown_only_to_a_person_at_a_terminal(
    as_json: bool, stdout_tty: bool, stderr_tty: bool, shown: bool
) -> None:
    assert files.show_progress(as_json, _Stream(stdout_tty), _Stream(stderr_tty)) is shown
