"""``disk_store`` on real files: layout, verification, idempotence, refusals, a full disk and a crash."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dataq.actions import files, storing
from dataq.actions.disk_store import DiskStoreAction
from dataq.actions.files import CopyMismatch, SourceMismatch, StorageConflict
from dataq.actions.layout import UnsafePath
from dataq.actions.registry import load_actions
from dataq.actions.storing import store, store_sync
from dataq.checksum import Aborted
from dataq.config import QueueSettings
from dataq.errors import ActionError, ConfigError, Retryable
from dataq.record import Record
from testbed.actions import action_context
from tests.actions_support import PUSHED_DATE, hidden_leftovers, make_file, md5, stored_copies, tiny_filesystem
from tests.checksum_vectors import hash_of

DATA = b"night sky " * 1000


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return tmp_path / "incoming"


def make_action(root: Path, tmp_path: Path, **options: Any) -> DiskStoreAction:
    return build_action({"root": str(root), **options}, tmp_path)


def build_action(table: dict[str, Any], tmp_path: Path) -> DiskStoreAction:
    """The action as the pop daemon builds it: through the registry, from a queue's options table."""
    queue = QueueSettings("transfer", actions=("disk_store",), action_options={"disk_store": table})
    (action,) = load_actions(action_context(queue))
    assert isinstance(action, DiskStoreAction)
    return action


def stored_files(root: Path) -> list[Path]:
    """The copies under ``root`` (its manifests aside: tests/integration/test_manifests.py is about them)."""
    return stored_copies(root)


# --- layout and verification --------------------------------------------------------------------------------


async def test_default_layout_is_date_then_checksum_prefix_then_checksum(root: Path, source: Path,
                                                                         tmp_path: Path) -> None:
    record = make_file(source, "c15e_140708_000001_ori.fits", DATA)
    await make_action(root, tmp_path).run(record)
    expected = root / PUSHED_DATE / record.checksum[:2] / record.checksum
    assert stored_files(root) == [expected]
    assert expected.read_bytes() == DATA
    assert Path(record.path).exists(), "the source stays unless remove_source is set"


async def test_layout_template_places_file_by_name_and_size(root: Path, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    await make_action(root, tmp_path, layout="by-size/{size}/{checksum2}-{name}").run(record)
    assert stored_files(root) == [root / "by-size" / str(len(DATA)) / f"{record.checksum[:2]}-a.fits"]


async def test_record_without_push_time_is_stored_under_today(root: Path, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA, pushed_at=None)
    before = time.strftime("%Y%m%d", time.gmtime())
    await make_action(root, tmp_path, layout="{date}/{name}").run(record)
    after = time.strftime("%Y%m%d", time.gmtime())
    (stored,) = stored_files(root)
    assert stored.parent.name in (before, after)


@pytest.mark.parametrize("algorithm", ["md5", "sha256", "xxh128"])
async def test_copy_that_reads_back_wrong_is_never_published(root: Path, source: Path, algorithm: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The read-back uses the fast identity hash (XXH3-128) of the bytes copied, whatever the record's algorithm.
    record = replace(make_file(source, "a.fits", DATA), checksum=hash_of(algorithm, DATA))
    real_fadvise = os.posix_fadvise

    def corrupt_after_fsync(fd: int, offset: int, length: int, advice: int) -> None:
        # A bit flipped on its way to the disk: the data written is not the data that comes back.
        with open(f"/proc/self/fd/{fd}", "r+b") as disk:
            disk.seek(10)
            disk.write(b"X")
        real_fadvise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", corrupt_after_fsync)
    with pytest.raises(CopyMismatch, match=r"read back .* with xxh128"):
        await store(record, str(root), "a.fits", algorithm=algorithm)
    assert stored_files(root) == []


def test_a_batch_asks_the_disk_for_its_small_copies_together_before_reading_any_back(
        root: Path, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A small copy is one read, which no readahead starts early: asked for one by one, the disk idles between them.
    small = [make_file(source, f"small-{n}.fits", DATA + bytes([n])) for n in range(5)]
    large = make_file(source, "large.fits", os.urandom(storing.READ_TOGETHER_BYTES + 1))
    events: list[tuple[str, int, int]] = []
    real_fadvise, real_hash_fd = os.posix_fadvise, storing.hash_fd

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        events.append(("advice", os.fstat(fd).st_size, advice))
        real_fadvise(fd, offset, length, advice)

    def read_back(fd: int, algorithm: str, abort: threading.Event | None = None) -> tuple[str, int]:
        events.append(("read", os.fstat(fd).st_size, 0))
        return real_hash_fd(fd, algorithm, abort)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    monkeypatch.setattr(storing, "hash_fd", read_back)
    outcomes = storing.store_batch_sync([(record, f"{n}.fits") for n, record in enumerate([*small, large])], str(root))
    assert all(isinstance(outcome, storing.Stored) for outcome in outcomes)
    first_read = events.index(next(event for event in events if event[0] == "read"))
    assert sorted(events[:first_read]) == sorted(
        [("advice", record.size, os.POSIX_FADV_DONTNEED) for record in [*small, large]]
        + [("advice", record.size, os.POSIX_FADV_WILLNEED) for record in small])
    assert len(events) - first_read == 6, "every copy is read back, after all the advice"


# --- idempotence and source removal -------------------------------------------------------------------------


async def test_storing_the_same_record_twice_keeps_one_untouched_copy(root: Path, source: Path,
                                                                      tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    first = await store(record, str(root), "x/a.fits")
    inode = os.stat(first.path).st_ino
    second = await store(record, str(root), "x/a.fits")
    assert (first.copied, second.copied) == (True, False)
    assert second.path == first.path and os.stat(second.path).st_ino == inode
    assert stored_files(root) == [root / "x" / "a.fits"]


async def test_remove_source_deletes_it_only_after_the_verified_copy(root: Path, source: Path,
                                                                     tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    await make_action(root, tmp_path, remove_source=True).run(record)
    assert not Path(record.path).exists()
    (stored,) = stored_files(root)
    assert md5(stored.read_bytes()) == record.checksum


async def test_retry_after_source_was_removed_succeeds_from_the_stored_copy(root: Path, source: Path,
                                                                            tmp_path: Path) -> None:
    # A crash after the source was removed but before the record was acknowledged: the record runs again.
    record = make_file(source, "a.fits", DATA)
    action = make_action(root, tmp_path, remove_source=True)
    await action.run(record)
    await action.run(record)
    assert len(stored_files(root)) == 1


async def test_already_stored_record_keeps_a_source_that_no_longer_matches(root: Path, source: Path,
                                                                           tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    await store(record, str(root), "a.fits")
    Path(record.path).write_bytes(DATA.upper())
    with pytest.raises(SourceMismatch):
        await store(record, str(root), "a.fits", remove_source=True)
    assert Path(record.path).read_bytes() == DATA.upper()


async def test_target_holding_other_data_is_a_conflict_left_untouched(root: Path, source: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    (root / "a.fits").write_bytes(b"someone else's file")
    with pytest.raises(StorageConflict, match="exists"):
        await store(record, str(root), "a.fits", remove_source=True)
    assert (root / "a.fits").read_bytes() == b"someone else's file"
    assert Path(record.path).exists()


# --- sources that do not match their record -----------------------------------------------------------------


async def test_source_of_another_size_is_refused_and_nothing_stored(root: Path, source: Path,
                                                                    tmp_path: Path) -> None:
    record = replace(make_file(source, "a.fits", DATA), size=len(DATA) + 1)
    with pytest.raises(SourceMismatch, match=f"has {len(DATA)} bytes; its record says {len(DATA) + 1}"):
        await make_action(root, tmp_path, remove_source=True).run(record)
    assert stored_files(root) == [] and hidden_leftovers(root) == []
    assert Path(record.path).exists()


async def test_source_with_another_checksum_is_refused_and_nothing_stored(root: Path, source: Path,
                                                                          tmp_path: Path) -> None:
    record = replace(make_file(source, "a.fits", DATA), checksum=md5(b"other"))
    with pytest.raises(SourceMismatch, match="has checksum"):
        await make_action(root, tmp_path, remove_source=True).run(record)
    assert stored_files(root) == [] and hidden_leftovers(root) == []
    assert Path(record.path).exists()


async def test_missing_source_is_refused(root: Path, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    os.unlink(record.path)
    with pytest.raises(SourceMismatch, match="does not exist"):
        await make_action(root, tmp_path).run(record)


# --- paths that would escape the root -----------------------------------------------------------------------


@pytest.mark.parametrize(("layout", "problem"), [
    ("../{checksum}", "leave its root"),
    ("{date}/../../{checksum}", "leave its root"),
    ("/etc/{name}", "must not start with '/'"),
    ("{date}//{checksum}", "leave its root"),
    ("{checksum.__class__}", "uses"),
    ("{checksum!r}", "no format spec or conversion"),
    ("{size:>20}", "no format spec or conversion"),
    ("{home}/{name}", "uses {home}"),
    ("{name", "malformed"),
])
def test_layout_that_could_escape_or_reach_into_objects_is_a_config_error(layout: str, problem: str,
                                                                          root: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"queues\.transfer\.disk_store") as caught:
        make_action(root, tmp_path, layout=layout)
    assert problem in str(caught.value)


@pytest.mark.parametrize("options", [{"root": "relative/store"}, {"algorithm": "md6"}, {"timeout": -1.0},
                                     {"rooot": "/x"}])
def test_bad_options_are_config_errors(options: dict[str, Any], root: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        build_action({"root": str(root), **options}, tmp_path)


async def test_file_name_of_dot_dot_cannot_climb_out(root: Path, tmp_path: Path) -> None:
    record = Record(path=f"{tmp_path}/..", checksum=md5(b""), size=0, pushed_at=0.0)
    with pytest.raises(UnsafePath):
        await make_action(root, tmp_path, layout="{name}").run(record)


async def test_checksum_holding_a_slash_cannot_climb_out(root: Path, source: Path, tmp_path: Path) -> None:
    # A queue's checksum pattern is configurable, so a checksum value is not trusted to be a plain name.
    record = replace(make_file(source, "a.fits", DATA), checksum="../../etc")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(UnsafePath):
        await make_action(root, tmp_path, layout="{checksum2}/{checksum}").run(record)
    assert sorted(tmp_path.rglob("*")) == before


async def test_symlinked_directory_pointing_out_of_the_root_is_refused(root: Path, source: Path,
                                                                       tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / PUSHED_DATE).symlink_to(outside)
    record = make_file(source, "a.fits", DATA)
    with pytest.raises(UnsafePath, match="symlink"):
        await make_action(root, tmp_path).run(record)
    assert list(outside.iterdir()) == []


async def test_symlink_at_the_final_name_is_refused(root: Path, source: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.fits"
    outside.write_bytes(DATA)
    record = make_file(source, "a.fits", DATA)
    (root / "a.fits").symlink_to(outside)
    with pytest.raises(UnsafePath, match="symlink"):
        await store(record, str(root), "a.fits")
    assert (root / "a.fits").is_symlink()


async def test_missing_root_fails_at_start(tmp_path: Path) -> None:
    action = make_action(tmp_path / "nowhere", tmp_path)
    with pytest.raises(ActionError, match="not a directory"):
        await action.start()


async def test_a_root_gone_after_start_is_an_outage_of_the_storage_not_a_fault_of_the_record(
        source: Path, tmp_path: Path) -> None:
    root = tmp_path / "mount"
    root.mkdir()
    action = make_action(root, tmp_path)
    await action.start()
    root.rmdir()  # as an unmounted network filesystem's mount point would vanish from under the daemon
    with pytest.raises(Retryable, match=f"storage root {root} does not exist") as raised:
        await action.run(make_file(source, "a.fits", DATA))
    assert raised.value.destination == str(root) == action.destination(make_file(source, "b.fits", DATA))


async def test_a_permission_problem_below_the_root_counts_as_the_records_failure(source: Path,
                                                                                 tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "locked").mkdir(parents=True)
    (root / "locked" / "a.fits").mkdir()  # the target name is taken by a directory: the record cannot go there
    with pytest.raises(ActionError) as raised:
        await store(make_file(source, "a.fits", DATA), str(root), "locked/a.fits")
    assert not isinstance(raised.value, Retryable)


# --- full disk, crash, cancellation -------------------------------------------------------------------------


async def test_a_full_filesystem_is_an_outage_of_the_storage_and_leaves_nothing_behind(source: Path,
                                                                                        tmp_path: Path) -> None:
    with tiny_filesystem(tmp_path / "tiny") as tiny:
        big = make_file(source, "big.fits", os.urandom(256 * 1024))
        with pytest.raises(Retryable, match="no space left") as raised:
            await store(big, str(tiny), "big.fits")
        assert raised.value.destination == str(tiny)
        assert list(tiny.rglob("*")) == []
        small = make_file(source, "small.fits", b"fits in")
        assert (await store(small, str(tiny), "small.fits")).copied


async def test_enospc_reported_by_the_sync_fails_the_record_and_leaves_nothing_behind(
        root: Path, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where a tmpfs cannot be mounted: delayed allocation (NFS, XFS) reports a full disk at sync, not at write.
    record = make_file(source, "a.fits", DATA)

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(storing, "sync_filesystem", full_disk)
    with pytest.raises(Retryable, match="no space left"):
        await store(record, str(root), "d/a.fits")
    assert stored_files(root) == [] and hidden_leftovers(root) == []


CRASH_BEFORE_PUBLISH = """
import os, signal, sys
from dataq.actions.storing import store_sync
from dataq.record import Record

def crash(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

os.link = os.rename = crash
path, checksum, size, root, relative = sys.argv[1:]
store_sync(Record(path=path, checksum=checksum, size=int(size)), root, relative)
"""


def test_crash_between_copy_and_rename_leaves_no_visible_half_file(root: Path, source: Path) -> None:
    record = make_file(source, "a.fits", os.urandom(3 * 1024 * 1024))
    crashed = subprocess.run([sys.executable, "-c", CRASH_BEFORE_PUBLISH, record.path, record.checksum,
                              str(record.size), str(root), "d/a.fits"], check=False)
    assert crashed.returncode == -signal.SIGKILL
    assert not (root / "d" / "a.fits").exists()
    (leftover,) = hidden_leftovers(root)
    assert leftover.name.startswith(".a.fits.")
    assert leftover.stat().st_size == record.size, "the crash came after the whole copy"

    stored = store_sync(record, str(root), "d/a.fits")
    assert stored.copied and md5(Path(stored.path).read_bytes()) == record.checksum
    assert hidden_leftovers(root) == [], "the retry cleans up what the crash left"


def test_aborted_copy_stops_and_removes_its_temporary_file(root: Path, source: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    abort = threading.Event()
    abort.set()
    with pytest.raises(Aborted):
        store_sync(record, str(root), "a.fits", abort=abort)
    assert stored_files(root) == [] and hidden_leftovers(root) == []


async def test_cancelled_store_stops_its_thread_and_leaves_no_file(root: Path, source: Path) -> None:
    record = make_file(source, "big.fits", os.urandom(64 * 1024 * 1024))
    finished = threading.Event()
    outcome: list[BaseException | storing.Stored] = []

    def run(abort: threading.Event) -> storing.Stored:
        try:
            stored = store_sync(record, str(root), "big.fits", abort=abort)
            outcome.append(stored)
            return stored
        except BaseException as exc:
            outcome.append(exc)
            raise
        finally:
            finished.set()

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await files.in_thread(run)
    assert await asyncio.to_thread(finished.wait, 30)
    assert len(outcome) == 1 and isinstance(outcome[0], Aborted)
    assert stored_files(root) == [] and hidden_leftovers(root) == []
