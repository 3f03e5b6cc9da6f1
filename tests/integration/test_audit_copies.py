"""``dataq audit --copies`` at a site that stores copies: every class found exactly, the repair (quarantine, records
marked lost), and the brakes, against a real Redis and real files."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from dataq.actions import storing
from dataq.audit import manifest
from dataq.cli.main import main
from dataq.custody.desk import ReceiptDesk
from dataq.custody.receipts import ReceiptKind
from dataq.record import Record
from dataq.store import Lost, QueueStore, Tracked
from tests.actions_support import empty_root, make_file
from tests.cli_support import on_store as on_queue

QUEUE = "archive"
WORKER = "archive-pop"
Audit = Callable[..., Result]
T = TypeVar("T")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return empty_root(tmp_path)


@pytest.fixture
def audit(tmp_path: Path, redis_url: str, root: Path) -> Audit:
    """``audit(*args)``: ``dataq audit`` in-process at the site "archive", whose queue stores under ``root``."""
    config = tmp_path / "dataq.toml"
    config.write_text(f'site = "archive"\ndata_dir = "{tmp_path / "data"}"\n[redis]\nurl = "{redis_url}"\n'
                      f'[queues.{QUEUE}]\nactions = ["disk_store"]\n[queues.{QUEUE}.disk_store]\nroot = "{root}"\n'
                      f'layout = "{{name}}"\n[queues.other]\npush_port = 9989\n')

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, ["audit", "--config", str(config), *args])

    return run


def on_store(redis_url: str, work: Callable[[QueueStore], Awaitable[T]]) -> T:
    return on_queue(redis_url, work, QUEUE)


def stored(tmp_path: Path, root: Path, redis_url: str, count: int, start: int = 0) -> list[Record]:
    """``count`` files stored under ``root`` as disk_store stores them, their records done at this site."""
    records = [make_file(tmp_path / "valley", f"frame-{n}.fits", b"dark frame %d " % n * 200)
               for n in range(start, start + count)]
    outcomes = storing.store_batch_sync([(r, Path(r.path).name) for r in records], str(root))
    assert all(isinstance(outcome, storing.Stored) for outcome in outcomes)

    async def run(store: QueueStore) -> None:
        await store.push_batch(records, source="valley")
        await store.heartbeat(WORKER, {"role": "pop"}, {"running": 0}, 30.0)
        claim = await store.claim(WORKER, count)
        assert all(await store.ack(WORKER, [(r.checksum, "") for r in claim.records]))

    on_store(redis_url, run)
    return records


def findings(result: Result) -> tuple[list[dict[str, str]], dict[str, int]]:
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return lines[:-1], lines[-1]["summary"]


def copy_of(root: Path, record: Record) -> Path:
    return root / Path(record.path).name


def whereabouts(redis_url: str, records: Sequence[Record]) -> list[Any]:
    return on_store(redis_url, lambda store: store.whereabouts([r.checksum for r in records], 3))


def test_a_root_whose_copies_are_all_as_named_is_clean(tmp_path: Path, root: Path, redis_url: str,
                                                       audit: Audit) -> None:
    stored(tmp_path, root, redis_url, 20)
    result = audit("--copies")
    assert result.exit_code == 0, result.output
    assert "arrived" in result.stdout and "20" in result.stdout and "findings" not in result.stdout
    deep = audit("--copies", "--deep", "--json")
    assert deep.exit_code == 0
    assert findings(deep) == ([], {"arrived": 20})


def test_each_missing_damaged_and_dark_file_is_classified_exactly(tmp_path: Path, root: Path, redis_url: str,
                                                                 audit: Audit) -> None:
    records = stored(tmp_path, root, redis_url, 20)
    copy_of(root, records[0]).unlink()
    copy_of(root, records[1]).write_bytes(b"truncated")
    flipped = bytearray(copy_of(root, records[2]).read_bytes())
    flipped[100] ^= 0x01
    copy_of(root, records[2]).write_bytes(bytes(flipped))  # same size: only a re-read sees it
    (root / "by-hand.fits").write_bytes(b"copied in by hand")
    (root / ".frame-9.fits.0a1b2c3d.dataq-tmp").write_bytes(b"a copy being written")

    result = audit("--copies", "--json")
    assert result.exit_code == 1
    found, summary = findings(result)
    assert summary == {"arrived": 18, "corrupt_copy": 1, "dark": 1, "missing_copy": 1}
    by_class = {item["class"]: item for item in found}
    assert by_class["missing_copy"]["id"] == records[0].checksum
    assert by_class["missing_copy"]["path"] == str(copy_of(root, records[0]))
    assert by_class["missing_copy"]["site"] == "archive"
    assert "not on disk" in by_class["missing_copy"]["detail"]
    assert by_class["corrupt_copy"]["id"] == records[1].checksum and "9 bytes" in by_class["corrupt_copy"]["detail"]
    assert by_class["dark"] == {"path": str(root / "by-hand.fits"), "id": "", "class": "dark", "site": "archive",
                                "detail": "under the root, named by no manifest"}

    deep = audit("--copies", "--deep", "--json")
    found, summary = findings(deep)
    assert summary == {"arrived": 17, "corrupt_copy": 2, "dark": 1, "missing_copy": 1}
    assert {item["id"] for item in found if item["class"] == "corrupt_copy"} == {records[1].checksum,
                                                                                records[2].checksum}


def test_the_table_names_each_finding_with_its_path_id_class_and_site(tmp_path: Path, root: Path, redis_url: str,
                                                                     audit: Audit) -> None:
    records = stored(tmp_path, root, redis_url, 3)
    copy_of(root, records[0]).unlink()
    result = audit("--copies")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"audit of the copies under {root} at archive")
    assert any(line.split() == ["missing_copy", "1"] for line in lines)
    assert any(line.split() == ["arrived", "2"] for line in lines)
    assert any(line.startswith(f"  {copy_of(root, records[0])}  {records[0].checksum}  missing_copy  archive  named by")
               for line in lines)


def test_repair_quarantines_damaged_copies_and_marks_their_records_lost(tmp_path: Path, root: Path, redis_url: str,
                                                                        audit: Audit) -> None:
    records = stored(tmp_path, root, redis_url, 20)
    missing, damaged, fine = records[0], records[1], records[2]
    copy_of(root, missing).unlink()
    copy_of(root, damaged).write_bytes(b"damaged")
    (root / "by-hand.fits").write_bytes(b"copied in by hand")

    result = audit("--copies", "--repair")
    assert result.exit_code == 1, result.output
    assert sum(line.startswith("repaired: ") for line in result.stdout.splitlines()) == 2
    quarantined = list((root / manifest.QUARANTINE_DIR).rglob("*.fits"))
    assert [path.read_bytes() for path in quarantined] == [b"damaged"], "moved aside, never deleted"
    assert not copy_of(root, damaged).exists() and (root / "by-hand.fits").exists(), "dark files are never touched"
    lost = whereabouts(redis_url, [missing, damaged, fine])
    assert isinstance(lost[0], Lost) and lost[0].why.startswith("missing_copy: ")
    assert isinstance(lost[1], Lost) and "moved to " in lost[1].why
    assert not isinstance(lost[2], Lost)
    receipt = ReceiptDesk("archive", 3).answer(missing.checksum, lost[0])
    assert (receipt.kind, receipt.error) == (ReceiptKind.UNKNOWN, f"lost: {lost[0].why}")
    events = on_store(redis_url, lambda store: store.events(50))
    assert sorted(event.record_id for event in events if event.kind == "lost") == sorted([missing.checksum,
                                                                                          damaged.checksum])

    # Sent again, each is stored anew (not Ignored: no longer remembered done) and named again.
    again = [make_file(tmp_path / "valley", Path(r.path).name, Path(r.path).read_bytes()) for r in (missing, damaged)]
    pushed = on_store(redis_url, lambda store: store.push_batch(again, source="valley"))
    assert pushed.pushed == [True, True]
    assert all(isinstance(known, Tracked) for known in whereabouts(redis_url, again))
    in_flight = audit("--copies", "--json")
    assert {item["class"] for item in findings(in_flight)[0]} == {"in_flight", "dark"}
    storing.store_batch_sync([(r, Path(r.path).name) for r in again], str(root))
    second = audit("--copies", "--json")
    assert second.exit_code == 1
    assert findings(second)[1] == {"arrived": 20, "dark": 1}, "nothing but the dark file"


def test_a_repair_above_the_limit_changes_nothing_unless_forced(tmp_path: Path, root: Path, redis_url: str,
                                                               audit: Audit) -> None:
    records = stored(tmp_path, root, redis_url, 30)
    for record in records[:11]:
        copy_of(root, record).unlink()
    refused = audit("--copies", "--repair")
    assert refused.exit_code == 2
    assert "would touch 11 of 30 files audited, more than --max-repair 10% allows (10)" in refused.stderr
    assert sum("missing_copy" in line for line in refused.stdout.splitlines()) == 12, "the findings, and their count"
    assert not any(isinstance(known, Lost) for known in whereabouts(redis_url, records))
    kept = on_store(redis_url, lambda store: store.audits())[f"copies:{root}"]
    assert (kept["counts"], kept["repaired"]) == ({"arrived": 19, "missing_copy": 11}, 0), \
        "what was found is on record though the repair was refused"
    assert audit("--copies", "--repair", "--max-repair", "5").exit_code == 2
    assert audit("--copies", "--repair", "--max-repair", "40%").exit_code == 1
    assert all(isinstance(known, Lost) for known in whereabouts(redis_url, records[:11]))
    for record in records[11:20]:
        copy_of(root, record).unlink()
    assert audit("--copies", "--repair", "--force").exit_code == 1
    assert all(isinstance(known, Lost) for known in whereabouts(redis_url, records[:20]))


def test_a_root_that_looks_unmounted_is_refused_whatever_force_says(tmp_path: Path, root: Path, redis_url: str,
                                                                   audit: Audit) -> None:
    records = stored(tmp_path, root, redis_url, 12)
    assert audit("--copies").exit_code == 0
    mounted = tmp_path / "mounted"
    root.rename(mounted)
    root.mkdir()  # the mount point, empty: the disk is not mounted
    swapped = audit("--copies", "--repair", "--force")
    assert swapped.exit_code == 2
    assert "has no manifest, but its last audit found 12 copies named there" in swapped.stderr
    root.rmdir()
    gone = audit("--copies")
    assert gone.exit_code == 2 and f"storing root {root} does not exist" in gone.stderr
    mounted.rename(root)
    for record in records:
        copy_of(root, record).unlink()
    emptied = audit("--copies", "--repair", "--force")
    assert emptied.exit_code == 2 and "holds no file, but its manifests name 12 copies" in emptied.stderr
    assert not any(isinstance(known, Lost) for known in whereabouts(redis_url, records))


@pytest.mark.parametrize(("args", "message"), [
    ((), "say what to audit: DIRECTORIES (of sources), or --copies"),
    (("--copies", "--max-repair", "lots"), "'lots' is neither a percentage (10%) nor a number of files (25)"),
    (("--copies", "--max-repair", "120%"), "is more than 100%"),
    (("--copies", "--queue", "nosuch"), "nosuch"),
    (("--copies", "--queue", "other"), "queue(s) other run neither disk_store nor archive_ingest"),
])
def test_bad_switches_and_queues_without_a_root_exit_2_saying_why(audit: Audit, args: tuple[str, ...],
                                                                  message: str) -> None:
    result = audit(*args)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr
