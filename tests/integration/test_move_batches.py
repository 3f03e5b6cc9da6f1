"""``network_move`` and ``disk_store`` work a batch at a time, yet each record keeps its own outcome."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dataq.actions import storing
from dataq.actions.files import SourceMismatch
from dataq.actions.registry import load_actions
from dataq.actions.rsync import WORK_PREFIX, remove_stale_work_dirs
from dataq.audit.manifest import OWN_DIR
from dataq.config import QueueSettings
from dataq.errors import ActionError, ConfigError
from dataq.record import Record
from dataq.store import QueueList, QueueStore
from testbed.actions import action_context
from testbed.rsync import RsyncDaemon, rsync_daemon
from tests.actions_support import (
    LOOPBACK,
    corrupting_rsync,
    counting_rsync,
    hidden_leftovers,
    make_file,
    md5,
    recording_rsync,
)
from tests.push_support import QUEUE, push_settings, start_push

BATCH = 8


def build(name: str, tmp_path: Path, concurrency: int = 2 * BATCH, **options: Any) -> Any:
    queue = QueueSettings("transfer", actions=(name,), action_options={name: options})
    (action,) = load_actions(action_context(queue, concurrency=concurrency))
    return action


def files(directory: Path, count: int, size: int = 20_000) -> list[Record]:
    return [make_file(directory, f"f{n:03}.fits", os.urandom(size)) for n in range(count)]


async def run_all(action: Any, records: list[Record]) -> list[BaseException | None]:
    return await asyncio.gather(*(action.run(record) for record in records), return_exceptions=True)


# --- network_move -------------------------------------------------------------------------------------------


async def test_a_batch_of_new_files_costs_one_rsync_verified_end_to_end(daemon: RsyncDaemon, valley: Path,
                                                                         tmp_path: Path) -> None:
    records = files(tmp_path / "mountain", BATCH)
    program, calls = recording_rsync(tmp_path)
    action = build("network_move", tmp_path, destination=daemon.url("valley"), rsync=str(program),
                   batch_size=BATCH, batch_age=60.0)
    assert await run_all(action, records) == [None] * BATCH
    assert len(calls.read_text().splitlines()) == 1, "rsync checks what it sent; nothing else reads the files"
    # The sources lie at their layout paths ({name}) beneath their directory: sent from there, no symlink tree.
    assert f" -- {tmp_path / 'mountain'}/ " in calls.read_text()
    assert sorted(daemon.received()) == [Path(record.path).name for record in records]
    for record in records:
        assert md5((valley / Path(record.path).name).read_bytes()) == record.checksum

    again = build("network_move", tmp_path, destination=daemon.url("valley"), rsync=str(program))
    await again.run(records[0])  # there already: not sent, checked where it is
    assert len(calls.read_text().splitlines()) == 3 and "--dry-run" in calls.read_text().splitlines()[2]
    assert len(daemon.received()) == BATCH


async def test_a_send_that_lost_rsyncs_mkpath_race_is_run_again(daemon: RsyncDaemon, valley: Path,
                                                                 tmp_path: Path) -> None:
    # Two batches to a new destination make its directory at once with --mkpath, and rsync fails the one that
    # finds it made by the other (exit status 11). This rsync loses that race on its first call, as rsync does.
    records = files(tmp_path / "mountain", BATCH)
    program, calls = recording_rsync(tmp_path)
    racing, lost = tmp_path / "racing-rsync", tmp_path / "lost-once"
    racing.write_text(
        "#!/bin/sh\n"
        f'if [ ! -e "{lost}" ]; then touch "{lost}"\n'
        """  echo 'rsync: [Receiver] mkdir "new" (in valley) failed: File exists (17)' >&2\n"""
        "  echo 'rsync error: error in file IO (code 11) at main.c(808) [Receiver=3.5.0]' >&2; exit 11\n"
        f'fi\nexec "{program}" "$@"\n')
    racing.chmod(0o755)
    action = build("network_move", tmp_path, destination=daemon.url("valley", "new"), rsync=str(racing),
                   batch_size=BATCH, batch_age=60.0)
    assert await run_all(action, records) == [None] * BATCH
    assert lost.exists() and len(calls.read_text().splitlines()) == 1, "sent again, once, and verified by it"
    assert sorted(path.name for path in (valley / "new").iterdir()) == [Path(r.path).name for r in records]


async def test_sources_not_at_their_layout_paths_are_sent_from_a_tree_laid_out_as_the_destination(
        daemon: RsyncDaemon, valley: Path, tmp_path: Path) -> None:
    records = files(tmp_path / "mountain", 3)
    program, calls = recording_rsync(tmp_path)
    action = build("network_move", tmp_path, destination=daemon.url("valley"), rsync=str(program),
                   layout="night/{name}", batch_size=3, batch_age=60.0)
    assert await run_all(action, records) == [None] * 3
    (call,) = calls.read_text().splitlines()
    assert f" -- {tmp_path / 'mountain'}/ " not in call and "/tree/ " in call
    for record in records:
        assert md5((valley / "night" / Path(record.path).name).read_bytes()) == record.checksum


async def test_large_files_are_cut_into_batches_of_64_mib_by_default_to_be_sent_side_by_side(
        daemon: RsyncDaemon, valley: Path, tmp_path: Path) -> None:
    # Under a cap of 1 GiB, ten files of 30 MB scanned into a queue went as a batch of two, then, gathered while it
    # was sent (the batcher's patience), one of eight: a single rsync stream for 240 MB (bench/move.py --whole).
    size = 33 << 20  # two make a batch: it is cut once its files reach 64 MiB
    records = [make_file(tmp_path / "mountain", f"big{n}.fits", bytes([n]) * size) for n in range(4)]
    program, counts = counting_rsync(tmp_path)
    # A long batch_age: only the bytes can cut a batch (under 1 GiB, the four would go together after 10 s).
    action = build("network_move", tmp_path, destination=daemon.url("valley"), rsync=str(program), batch_age=10.0)
    assert await run_all(action, records) == [None] * len(records)
    assert sorted(int(line) for line in counts.read_text().split()) == [2, 2]
    assert sorted(daemon.received()) == sorted(Path(record.path).name for record in records)


async def test_a_daemon_at_its_max_connections_holds_back_the_batches_past_it_instead_of_an_outage(
        valley: Path, tmp_path: Path) -> None:
    # Four batches go at once; a daemon that takes one connection at a time refuses the other three ("max
    # connections (1) reached"). That is not an outage while a connection of this action is open: they wait for it.
    records = files(tmp_path / "mountain", 4 * BATCH)
    with rsync_daemon(tmp_path / "rsyncd", {"valley": valley}, max_connections=1) as daemon:
        action = build("network_move", tmp_path, destination=daemon.url("valley"), batch_size=BATCH)
        assert await run_all(action, records) == [None] * len(records)
        assert sorted(daemon.received()) == sorted(Path(record.path).name for record in records)


async def test_one_bad_record_of_a_batch_fails_alone(daemon: RsyncDaemon, valley: Path, tmp_path: Path) -> None:
    good = files(tmp_path / "mountain", 4)
    wrong_checksum = replace(make_file(tmp_path / "mountain", "wrong.fits", b"data"), checksum=md5(b"other"))
    gone = make_file(tmp_path / "mountain", "gone.fits", b"removed before its turn")
    os.unlink(gone.path)
    blocked = make_file(tmp_path / "mountain", "blocked.fits", b"its name is taken by a directory there")
    (valley / "blocked.fits" / "inside").mkdir(parents=True)  # rsync cannot put a file there
    action = build("network_move", tmp_path, destination=daemon.url("valley"), batch_size=BATCH)
    outcomes = await run_all(action, [*good, wrong_checksum, gone, blocked])
    assert outcomes[:4] == [None] * 4
    assert isinstance(outcomes[4], SourceMismatch) and "has checksum" in str(outcomes[4])
    assert isinstance(outcomes[5], SourceMismatch) and "does not exist" in str(outcomes[5])
    assert isinstance(outcomes[6], ActionError) and "blocked.fits" in str(outcomes[6])
    assert sorted(daemon.received()) == sorted(Path(record.path).name for record in good)


async def test_with_reread_a_file_damaged_at_the_destination_fails_only_its_record(daemon: RsyncDaemon, valley: Path,
                                                                       tmp_path: Path) -> None:
    records = files(tmp_path / "mountain", 4)
    victim = Path(records[2].path).name
    liar = corrupting_rsync(tmp_path, valley / victim)
    action = build("network_move", tmp_path, destination=daemon.url("valley"), rsync=str(liar), remove_source=True,
                   reread=True, batch_size=BATCH)
    outcomes = await run_all(action, records)
    assert [outcome is None for outcome in outcomes] == [True, True, False, True]
    assert "destination differs from the source" in str(outcomes[2])
    assert [Path(record.path).exists() for record in records] == [False, False, True, False], \
        "only verified files' sources are removed"


async def test_each_record_of_a_batch_is_handed_on_only_once_its_own_file_is_verified(
        daemon: RsyncDaemon, valley: Path, redis_url: str, tmp_path: Path) -> None:
    records = files(tmp_path / "mountain", 4)
    liar = corrupting_rsync(tmp_path, valley / Path(records[1].path).name)
    next_site = await start_push(push_settings(redis_url, tmp_path / "next-data"))
    next_queue = QueueStore.from_url(redis_url, QUEUE)
    try:
        action = build("network_move", tmp_path, destination=daemon.url("valley"), rsync=str(liar),
                       next_sites=[f"{LOOPBACK}:{next_site.port}"], next_path="/valley/{relpath}", reread=True,
                       batch_size=BATCH)
        try:
            outcomes = await run_all(action, records)
        finally:
            await action.close()
        assert [outcome is None for outcome in outcomes] == [True, False, True, True]
        handed = {record.checksum for record in await next_queue.list_records(QueueList.ACTIVE)}
        assert handed == {records[n].checksum for n in (0, 2, 3)}
    finally:
        await next_queue.close()
        await next_site.shutdown()


async def test_a_file_of_the_same_size_and_time_but_other_data_is_sent_again(daemon: RsyncDaemon, valley: Path,
                                                                             tmp_path: Path) -> None:
    (record,) = files(tmp_path / "mountain", 1)
    impostor = valley / Path(record.path).name
    impostor.parent.mkdir(parents=True, exist_ok=True)
    impostor.write_bytes(os.urandom(record.size))
    stat = os.stat(record.path)
    os.utime(impostor, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    await build("network_move", tmp_path, destination=daemon.url("valley")).run(record)
    assert md5(impostor.read_bytes()) == record.checksum


async def test_records_of_another_algorithm_are_verified_against_the_sources_md5(daemon: RsyncDaemon,
                                                                                 valley: Path, tmp_path: Path) -> None:
    import hashlib

    data = os.urandom(5000)
    path = tmp_path / "mountain" / "a.fits"
    path.parent.mkdir()
    path.write_bytes(data)
    record = Record(path=str(path), checksum=hashlib.sha256(data).hexdigest(), size=len(data))
    await build("network_move", tmp_path, destination=daemon.url("valley"), algorithm="sha256").run(record)
    assert (valley / "a.fits").read_bytes() == data


async def test_names_rsync_escapes_are_matched_to_their_records(daemon: RsyncDaemon, valley: Path,
                                                                tmp_path: Path) -> None:
    names = ["tab\there.fits", "new\nline.fits", "ünïcode.fits", "back\\#101slash.fits", " lead.fits"]
    records = [make_file(tmp_path / "mountain", name, os.urandom(100)) for name in names]
    action = build("network_move", tmp_path, destination=daemon.url("valley"), batch_size=BATCH)
    assert await run_all(action, records) == [None] * len(names)
    assert sorted(path.name for path in valley.iterdir()) == sorted(names)


async def test_two_records_bound_for_one_target_in_a_batch_do_not_both_claim_it(daemon: RsyncDaemon,
                                                                                 tmp_path: Path) -> None:
    first = make_file(tmp_path / "one", "same.fits", b"first")
    second = make_file(tmp_path / "two", "same.fits", b"second")
    action = build("network_move", tmp_path, destination=daemon.url("valley"), batch_size=2, batch_age=60.0)
    outcomes = await run_all(action, [first, second])
    assert sorted(outcomes, key=lambda outcome: outcome is None)[1] is None, "one of them is moved"
    (refused,) = [outcome for outcome in outcomes if outcome is not None]
    assert isinstance(refused, ActionError) and "also the target of record" in str(refused)


# --- disk_store ---------------------------------------------------------------------------------------------


def counting(monkeypatch: pytest.MonkeyPatch, target: object, name: str) -> list[int]:
    """Replace ``target.name`` (a function of a descriptor) by one that also notes each call."""
    calls: list[int] = []
    real = getattr(target, name)

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(target, name, counted)
    return calls


async def test_a_batch_is_stored_with_two_syncs_of_the_filesystem(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    records = files(tmp_path / "mountain", BATCH)
    syncs = counting(monkeypatch, storing, "sync_filesystem")
    (tmp_path / "store").mkdir()
    action = build("disk_store", tmp_path, root=str(tmp_path / "store"), layout="{name}", batch_size=BATCH,
                   batch_age=60.0)
    assert await run_all(action, records) == [None] * BATCH
    assert len(syncs) == 2, "copies made durable together, then their names"
    for record in records:
        assert md5((tmp_path / "store" / Path(record.path).name).read_bytes()) == record.checksum


async def test_disk_store_runs_at_once_as_many_records_as_its_batches_in_flight_hold(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    small = build("disk_store", tmp_path, root=str(tmp_path / "store"))
    assert small.records_at_once() == 2 * 100, "before any record's size is known: two batches of 100 at most"
    assert await run_all(small, files(tmp_path / "small", 4, size=20_000)) == [None] * 4
    assert small.records_at_once() == 2 * 1000, "small files: two batches of 1,000, the default batch_size"
    large = build("disk_store", tmp_path, root=str(tmp_path / "store"), batch_bytes=50_000)
    assert await run_all(large, files(tmp_path / "large", 4, size=20_000)) == [None] * 4
    assert large.records_at_once() == 2 * 2, "two files in a batch of 50,000 bytes: not 2,000 waiting their turn"


async def test_without_syncfs_each_copy_and_directory_is_fsynced(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    records = files(tmp_path / "mountain", 4)
    monkeypatch.setattr(storing, "SYNCFS", None)
    synced = counting(monkeypatch, os, "fsync")
    (tmp_path / "store").mkdir()
    outcomes = storing.store_batch_sync([(record, f"d/{Path(record.path).name}") for record in records],
                                        str(tmp_path / "store"))
    assert all(isinstance(outcome, storing.Stored) and outcome.copied for outcome in outcomes)
    # one per copy, one for the new directory "d", one for "d" once the names are in it; then the manifest and
    # the three folders its creation added an entry to (.dataq/manifests, .dataq, the root)
    assert len(synced) == len(records) + 2 + 4


async def test_one_bad_record_of_a_stored_batch_fails_alone(tmp_path: Path) -> None:
    good = files(tmp_path / "mountain", 3)
    wrong = replace(make_file(tmp_path / "mountain", "wrong.fits", b"data"), checksum=md5(b"other"))
    (tmp_path / "store").mkdir()
    outcomes = storing.store_batch_sync([(record, Path(record.path).name) for record in [*good, wrong]],
                                        str(tmp_path / "store"), remove_source=True)
    assert all(isinstance(outcome, storing.Stored) for outcome in outcomes[:3])
    assert isinstance(outcomes[3], SourceMismatch)
    assert [Path(record.path).exists() for record in [*good, wrong]] == [False, False, False, True]
    assert sorted(path.name for path in (tmp_path / "store").iterdir() if path.name != OWN_DIR) == \
        sorted(Path(r.path).name for r in good)


CRASH_AT_PUBLISH = """
import os, signal, sys
from dataq.actions.storing import store_batch_sync
from dataq.record import Record
from dataq.store import QueueList, QueueStore

def crash(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

os.link = os.rename = crash
root, *fields = sys.argv[1:]
records = [Record(path=fields[i], checksum=fields[i + 1], size=int(fields[i + 2])) for i in range(0, len(fields), 3)]
store_batch_sync([(record, os.path.basename(record.path)) for record in records], root)
"""


def test_a_kill_in_the_middle_of_a_batch_leaves_no_visible_file_and_the_retry_stores_all(tmp_path: Path) -> None:
    records = files(tmp_path / "mountain", 4, size=512 * 1024)
    root = tmp_path / "store"
    root.mkdir()
    argv = [str(field) for record in records for field in (record.path, record.checksum, record.size)]
    crashed = subprocess.run([sys.executable, "-c", CRASH_AT_PUBLISH, str(root), *argv], check=False)
    assert crashed.returncode == -signal.SIGKILL
    assert [path for path in root.iterdir() if not path.name.startswith(".")] == []
    assert len(hidden_leftovers(root)) == len(records), "every copy was written before the first publish"
    outcomes = storing.store_batch_sync([(record, Path(record.path).name) for record in records], str(root))
    assert all(isinstance(outcome, storing.Stored) and outcome.copied for outcome in outcomes)
    assert hidden_leftovers(root) == [], "the retry cleans up what the crash left"


def test_a_leftover_of_a_second_attempt_is_cleaned_when_its_file_is_found_stored(tmp_path: Path) -> None:
    # A worker presumed dead (a late heartbeat) runs a record twice: one attempt publishes it, the other is
    # killed with its copy half written. The retry finds the file stored, and cleans up the half copy.
    records = files(tmp_path / "mountain", 2, size=64 * 1024)
    root = tmp_path / "store"
    root.mkdir()
    batch = [(record, Path(record.path).name) for record in records]
    storing.store_batch_sync(batch, str(root))
    elsewhere = tmp_path / "half"
    elsewhere.mkdir()
    argv = [str(field) for record in records for field in (record.path, record.checksum, record.size)]
    crashed = subprocess.run([sys.executable, "-c", CRASH_AT_PUBLISH, str(elsewhere), *argv], check=False)
    assert crashed.returncode == -signal.SIGKILL
    for leftover in hidden_leftovers(elsewhere):
        leftover.rename(root / leftover.name)
    assert len(hidden_leftovers(root)) == len(records)
    outcomes = storing.store_batch_sync(batch, str(root))
    assert all(isinstance(outcome, storing.Stored) and not outcome.copied for outcome in outcomes)
    assert hidden_leftovers(root) == [], "the half copies beside the stored files are gone"


@pytest.mark.parametrize("name", ["disk_store", "network_move"])
@pytest.mark.parametrize(("key", "value", "problem"), [("batch_size", 0, "batch_size must be at least 1"),
                                                       ("batch_bytes", 0, "batch_bytes must be at least 1"),
                                                       ("batch_age", -1.0, "batch_age must be")])
def test_bad_batching_options_are_config_errors(name: str, key: str, value: Any, problem: str,
                                                tmp_path: Path) -> None:
    where = {"root": str(tmp_path)} if name == "disk_store" else {"destination": "/data"}
    with pytest.raises(ConfigError, match=f"queues.transfer.{name}.*{problem}"):
        build(name, tmp_path, **where, **{key: value})


def test_work_directories_of_dead_daemons_are_removed_and_those_of_live_ones_kept(tmp_path: Path) -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    mine, dead = tmp_path / f"{WORK_PREFIX}{os.getpid()}-a", tmp_path / f"{WORK_PREFIX}{ended.pid}-b"
    other = tmp_path / "dataq-move-notapid"
    for directory in (mine, dead, other):
        (directory / "tree").mkdir(parents=True)
    assert remove_stale_work_dirs(str(tmp_path)) == [str(dead)]
    assert mine.exists() and other.exists() and not dead.exists()
