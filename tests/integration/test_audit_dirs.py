"""``dataq audit DIR`` at a lone site (the end of its own chain), against a real Redis: what it holds done has
arrived, what it holds queued or inactive is in flight or failed, what it never saw is never fed; an unreadable file
is a finding and the audit goes on; the repair feeds what was never fed, within the brakes."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dataq.audit import sources
from dataq.audit.hashing import Hashing
from dataq.cli.main import main
from dataq.feed.watch import WatchOptions
from dataq.record import Record
from dataq.store import QueueList, QueueStore, Tracked
from tests.cascade_support import make_sources
from tests.cli_support import on_store

QUEUE = "night"
Audit = Callable[..., Result]


@pytest.fixture
def audit(tmp_path: Path, redis_url: str) -> Audit:
    config = tmp_path / "dataq.toml"
    config.write_text(f'site = "mountain"\ndata_dir = "{tmp_path / "data"}"\n[redis]\nurl = "{redis_url}"\n'
                      f'[feed]\nexclude = ["*.log"]\nsettle = 0\n'
                      f'[queues.{QUEUE}]\nactions = ["echo"]\nmax_errors = 0\n')

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, ["audit", "--config", str(config), "--json", *args])

    return run


def classes(result: Result) -> dict[str, str]:
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return {item["path"]: item["class"] for item in lines[:-1]}


def prepare(redis_url: str, done: list[Record], queued: list[Record], failed: list[Record]) -> None:
    async def run(store: QueueStore) -> None:
        await store.push_batch([*done, *failed], source="feeder")
        await store.heartbeat("pop", {"role": "pop"}, {"running": 0}, 30.0)
        claim = await store.claim("pop", len(done) + len(failed))
        by_id = {record.checksum for record in done}
        assert all(await store.ack("pop", [(r.checksum, "") for r in claim.records if r.checksum in by_id]))
        await store.fail("pop", [(r.checksum, "no such destination") for r in claim.records if r.checksum not in by_id],
                         max_errors=0)
        await store.push_batch(queued, source="feeder")

    on_store(redis_url, run, QUEUE)


def test_each_file_of_a_lone_site_is_classified_and_an_unreadable_one_is_a_finding(
        tmp_path: Path, redis_url: str, audit: Audit, monkeypatch: pytest.MonkeyPatch) -> None:
    night = tmp_path / "night"
    done, queued = make_sources(night, 4, "done"), make_sources(night, 2, "queued")
    never = make_sources(night, 3, "new")
    (night / "observing.log").write_text("not fed: excluded by [feed]")
    (night / ".hidden.fits").write_text("not fed: hidden")
    prepare(redis_url, done, queued, [])
    unreadable = never[0].path
    real = sources.FileHashing.of_regular_file

    def of_regular_file(hashing: sources.FileHashing, fd: int, size: int) -> tuple[str, int]:
        # Tests run as root, whom no file's mode stops: the read fails here instead (in the forked hashers).
        if os.readlink(f"/proc/self/fd/{fd}") == unreadable:
            raise PermissionError(13, "Permission denied")
        return real(hashing, fd, size)

    monkeypatch.setattr(sources.FileHashing, "of_regular_file", of_regular_file)
    result = audit(str(night))
    assert result.exit_code == 1, result.output
    found = classes(result)
    assert {path: found[path] for path in (r.path for r in queued)} == dict.fromkeys((r.path for r in queued),
                                                                                     "in_flight")
    assert [found[r.path] for r in never] == ["unreadable", "never_fed", "never_fed"]
    assert not any(path.endswith((".log", ".hidden.fits")) for path in found), "chosen as the feeder chooses"
    assert all(r.path not in found for r in done), "done at the end of its chain: arrived, not a finding"


def test_a_record_inactive_here_is_failed_with_its_last_error(tmp_path: Path, redis_url: str, audit: Audit) -> None:
    night = tmp_path / "night"
    (failed,) = make_sources(night, 1, "failed")
    prepare(redis_url, [], [], [failed])
    result = audit(str(night))
    assert result.exit_code == 1
    (finding, summary) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (finding["class"], finding["site"]) == ("failed", "mountain")
    assert "no such destination" in finding["detail"]
    assert summary == {"summary": {"failed": 1}}


def test_the_repair_feeds_what_no_site_knows_within_the_limit(tmp_path: Path, redis_url: str, audit: Audit) -> None:
    night = tmp_path / "night"
    never = make_sources(night, 12, "new")
    refused = audit("--repair", str(night))
    assert refused.exit_code == 2 and "would touch 12 of 12 files audited" in refused.stderr
    assert on_store(redis_url, lambda s: s.list_records(QueueList.ACTIVE), QUEUE) == []
    assert audit("--repair", "--max-repair", "100%", str(night)).exit_code == 1
    known = on_store(redis_url, lambda s: s.whereabouts([r.checksum for r in never], 0), QUEUE)
    assert all(isinstance(item, Tracked) for item in known)
    assert set(classes(audit(str(night))).values()) == {"in_flight"}, "fed: queued now"


async def test_a_file_changed_within_settle_is_left_for_later_as_a_feeder_leaves_it(tmp_path: Path) -> None:
    night = tmp_path / "night"
    (record,) = make_sources(night, 1, "writing")
    options = WatchOptions(str(night), settle=2.0)
    now = Path(record.path).stat().st_mtime
    with sources.HashPool(1) as pool:
        async def audited(at: float) -> list[str]:
            hashing = Hashing(pool, [options], "md5", sources.settled_before(options, now=at))
            return [item.path async for group in hashing.groups(10) for item in group]

        assert await audited(now + 1.0) == [], "still being written, maybe"
        assert await audited(now + 2.5) == [record.path]


def test_a_folder_that_cannot_be_listed_is_said_and_one_removed_meanwhile_is_passed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    night = tmp_path / "night"
    (kept,) = make_sources(night / "a", 1, "kept")
    make_sources(night / "locked", 1, "locked")
    make_sources(night / "rotated", 1, "rotated")
    real = os.scandir

    def scandir(path: str) -> Any:
        # Tests run as root, whom no folder's mode stops: the listing fails here instead.
        if path.endswith("/locked"):
            raise PermissionError(13, "Permission denied")
        if path.endswith("/rotated"):
            raise FileNotFoundError(2, "No such file or directory")
        return real(path)

    monkeypatch.setattr(sources.os, "scandir", scandir)
    unlisted: list[tuple[str, str]] = []
    assert [path for part in sources.listed(WatchOptions(str(night), recursive=True), unlisted) for path in part] \
        == [kept.path]
    assert unlisted == [(str(night / "locked"), "Permission denied")]
