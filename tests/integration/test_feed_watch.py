"""``dataq feed --watch``, in process: a watched directory's complete files reach a real push daemon through a
real spool, once each, whatever order they come in and however long the push daemon is away."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dataq.config import QueueSettings
from dataq.config.activity_settings import ActivitySettings
from dataq.embedded.redis_server import free_port
from dataq.feed import file_intake
from dataq.feed.client import client_tls_context
from dataq.feed.watch import Watcher, WatchError, WatchOptions
from dataq.store import QueueStore
from testbed.waits import eventually
from tests.feed_support import StartFeeder, md5, queued, until_queued, until_spool_empty, write_file
from tests.push_support import LOOPBACK, QUEUE, Certs, StartPush, push_settings, start_push


async def test_a_file_closed_after_writing_is_pushed_with_its_checksum(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)])
    checksum = write_file(fed.root / "a.fits", b"x" * 1000)
    assert await until_queued(store, 1) == {checksum: str(fed.root / "a.fits")}
    await until_spool_empty(fed)
    assert await fed.shutdown() == 0


async def test_files_present_at_start_are_found_by_the_scan_and_hidden_or_temporary_names_are_skipped(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    root = tmp_path / "incoming"
    wanted = {write_file(root / f"f{n}.fits", f"data {n}".encode()): str(root / f"f{n}.fits") for n in range(20)}
    for name in (".hidden", "x.tmp", "y.part", "z~"):
        write_file(root / name, name.encode())
    await feeder([(daemon.host, daemon.port)], root=root)
    assert await until_queued(store, 20) == wanted
    await asyncio.sleep(0.5)
    assert await queued(store) == wanted


@pytest.mark.parametrize("budget", [0.0, 5.0], ids=["threads-after-the-first", "all-on-the-event-loop"])
async def test_a_burst_of_files_of_every_size_is_pushed_whoever_looks_at_them(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, monkeypatch: pytest.MonkeyPatch, budget: float
) -> None:
    # Files at or over the event loop's size limit are hashed on threads; a batch out of the loop's time goes to
    # a checksum thread. Made small here so that a few files take every road.
    monkeypatch.setattr(file_intake, "INLINE_BYTES", 20_000)
    monkeypatch.setattr(file_intake, "INLINE_BUDGET", budget)
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)])
    wanted = {write_file(fed.root / f"f{n:03d}.fits", os.urandom(19_999 + n % 3)): str(fed.root / f"f{n:03d}.fits")
              for n in range(120)}
    assert await until_queued(store, 120) == wanted
    await until_spool_empty(fed)


async def test_a_file_moved_into_the_directory_is_pushed(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)])
    outside = tmp_path / "staging" / "b.fits"
    checksum = write_file(outside, b"moved in")
    os.rename(outside, fed.root / "b.fits")
    assert await until_queued(store, 1) == {checksum: str(fed.root / "b.fits")}


async def test_a_file_written_slowly_in_place_is_pushed_once_with_the_checksum_of_all_its_bytes(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)])
    # Begun well after the watch: a writer that begins as the watch starts and pauses longer than the start scan's
    # settle time is left to chance (Watcher._scan), and file times can read a clock tick early (a CI run took
    # this file's first 10,000 bytes through the start scan).
    await asyncio.sleep(0.05)
    path = fed.root / "slow.fits"
    data = b""
    with open(path, "wb") as out:
        for n in range(6):
            chunk = bytes([n]) * 10_000
            out.write(chunk)
            out.flush()
            data += chunk
            await asyncio.sleep(0.3)
    assert await until_queued(store, 1) == {md5(data): str(path)}
    await asyncio.sleep(0.5)
    assert len(await queued(store)) == 1


async def test_a_file_being_written_when_the_feeder_starts_is_pushed_whole_when_its_writer_closes_it(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    root = tmp_path / "incoming"
    root.mkdir()
    path = root / "open.fits"
    with open(path, "wb") as out:
        out.write(b"a" * 5000)
        out.flush()
        await feeder([(daemon.host, daemon.port)], root=root, settle=0.5)
        for _ in range(5):  # keeps changing through the start scan's settle time
            await asyncio.sleep(0.2)
            out.write(b"b" * 5000)
            out.flush()
    data = path.read_bytes()
    assert await until_queued(store, 1) == {md5(data): str(path)}
    await asyncio.sleep(1.0)
    assert len(await queued(store)) == 1


async def test_include_and_exclude_globs_choose_the_files(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    root = tmp_path / "incoming"
    fits = write_file(root / "a.fits", b"a")
    write_file(root / "a.txt", b"t")
    write_file(root / "skip.fits", b"s")
    part = write_file(root / "b.part", b"p")  # named by an include: taken despite the default excludes
    await feeder([(daemon.host, daemon.port)], root=root, include=("*.fits", "*.part"), exclude=("skip*",))
    assert await until_queued(store, 2) == {fits: str(root / "a.fits"), part: str(root / "b.part")}
    await asyncio.sleep(0.5)
    assert len(await queued(store)) == 2


async def test_recursive_watching_takes_files_of_a_new_subdirectory_even_those_written_before_its_watch(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)], recursive=True)
    expected = {write_file(fed.root / "night1" / "deep" / f"f{n}", f"night {n}".encode()):
                str(fed.root / "night1" / "deep" / f"f{n}") for n in range(10)}
    assert await until_queued(store, 10) == expected


async def test_without_recursive_subdirectories_are_not_fed(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)])
    write_file(fed.root / "sub" / "f", b"below")
    top = write_file(fed.root / "g", b"top")
    assert await until_queued(store, 1) == {top: str(fed.root / "g")}
    await asyncio.sleep(0.5)
    assert len(await queued(store)) == 1


async def test_polling_finds_complete_files_where_inotify_sees_nothing(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)], poll=0.2, recursive=True)
    expected = {write_file(fed.root / "d" / f"f{n}", f"p {n}".encode()): str(fed.root / "d" / f"f{n}")
                for n in range(5)}
    assert await until_queued(store, 5) == expected


async def test_a_restart_neither_hashes_nor_sends_again_what_was_answered(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    root = tmp_path / "incoming"
    for n in range(30):
        write_file(root / f"f{n}", f"r {n}".encode())
    fed = await feeder([(daemon.host, daemon.port)], root=root)
    await until_queued(store, 30)
    await until_spool_empty(fed)
    assert await fed.shutdown() == 0
    assert fed.status().files_known == 30
    again = await feeder([(daemon.host, daemon.port)], root=root)
    await asyncio.sleep(1.0)
    assert await again.shutdown() == 0
    assert again.status().notes["answered"] == 30  # nothing more was sent
    assert len(await queued(store)) == 30


async def test_records_wait_in_the_spool_while_the_push_daemon_is_away_and_go_when_it_is_back(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    port = free_port()
    fed = await feeder([(LOOPBACK, port)])
    expected = {write_file(fed.root / f"f{n}", f"w {n}".encode()): str(fed.root / f"f{n}") for n in range(10)}

    async def spooled() -> bool:
        return fed.status().pending == 10 and bool(fed.status().notes.get("outage_since"))

    await eventually(spooled)
    await push_daemon(port=port)
    assert await until_queued(store, 10, timeout=40) == expected
    await until_spool_empty(fed)
    assert not fed.status().notes.get("outage_since")


async def test_a_feeder_whose_push_daemon_went_away_stops_at_once_when_nothing_awaits_an_answer(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    # A grace far longer than the wait below: only a stop that does not spend it can pass.
    fed = await feeder([(LOOPBACK, daemon.port)], grace=120.0)
    write_file(fed.root / "f", b"answered")
    await until_queued(store, 1)
    await until_spool_empty(fed)
    await daemon.shutdown()  # as when `dataq run` stops its daemons and its feeders together

    async def outage() -> bool:
        return bool(fed.status().notes.get("outage_since"))

    await eventually(outage)
    fed.stop.set()
    assert await asyncio.wait_for(fed.task, 10) == 0


async def test_a_file_deleted_before_it_is_sent_is_dropped_with_a_warning(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    port = free_port()
    fed = await feeder([(LOOPBACK, port)])
    write_file(fed.root / "gone", b"soon deleted")
    kept = write_file(fed.root / "kept", b"kept")

    async def spooled() -> bool:
        return fed.status().pending == 2

    await eventually(spooled)
    (fed.root / "gone").unlink()
    await push_daemon(port=port)
    assert await until_queued(store, 1, timeout=40) == {kept: str(fed.root / "kept")}
    await until_spool_empty(fed)
    assert len(await queued(store)) == 1


async def test_with_the_first_target_down_records_go_to_the_second(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(LOOPBACK, free_port()), (daemon.host, daemon.port)])
    checksum = write_file(fed.root / "f", b"fail over")
    assert await until_queued(store, 1) == {checksum: str(fed.root / "f")}
    await until_spool_empty(fed)
    assert fed.status().notes["connected"] == f"{daemon.host}:{daemon.port}"


async def test_the_first_target_is_tried_again_after_failback_after(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    second = await push_daemon()
    first_port = free_port()
    fed = await feeder([(LOOPBACK, first_port), (second.host, second.port)], failback_after=0.5)
    write_file(fed.root / "f1", b"to the second")
    await until_queued(store, 1)
    first = await push_daemon(port=first_port)

    async def back_on_the_first() -> bool:
        return fed.status().notes.get("connected") == f"{first.host}:{first.port}"

    await eventually(back_on_the_first)
    write_file(fed.root / "f2", b"to the first")
    await until_queued(store, 2)


async def test_a_full_disk_under_the_spool_stops_intake_with_a_clear_error_until_there_is_room_again(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture
) -> None:
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        port = free_port()
        fed = await feeder([(LOOPBACK, port)], spool=small / "spool")
        ballast = small / "ballast"
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while True:  # the rest of the file system
                os.write(fd, b"\0" * 4096)
        os.close(fd)
        expected = {write_file(fed.root / f"f{n:03d}", f"full {n}".encode()): str(fed.root / f"f{n:03d}")
                    for n in range(200)}

        async def intake_stopped() -> bool:
            return "intake stopped: the spool's disk is full" in caplog.text

        await eventually(intake_stopped)
        assert fed.status().pending < 200
        ballast.unlink()
        await push_daemon(port=port)
        assert await until_queued(store, 200, timeout=60) == expected
        await until_spool_empty(fed)
        assert await fed.shutdown() == 0
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


async def test_a_watched_directory_removed_stops_the_feeder_with_an_error_naming_it(
    push_daemon: StartPush, feeder: StartFeeder
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)])
    fed.root.rmdir()
    with pytest.raises(WatchError, match=f"the watched directory {fed.root} was removed or moved away"):
        await asyncio.wait_for(fed.task, 10)


async def test_a_directory_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    paths = Watcher(WatchOptions(str(tmp_path / "nowhere"))).paths()
    with pytest.raises(WatchError, match=f"cannot watch {tmp_path / 'nowhere'}: no such directory"):
        await anext(paths)


async def test_a_subdirectory_renamed_in_the_tree_has_its_new_files_fed_under_its_new_name(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)], recursive=True)
    (fed.root / "staging").mkdir()
    await asyncio.sleep(0.3)
    os.rename(fed.root / "staging", fed.root / "night1")
    await asyncio.sleep(0.3)
    checksum = write_file(fed.root / "night1" / "img.fits", b"after the rename")
    assert await until_queued(store, 1) == {checksum: str(fed.root / "night1" / "img.fits")}


async def test_a_file_name_that_is_not_utf8_does_not_stop_the_feeder(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)])
    with open(os.path.join(os.fsencode(fed.root), b"bad-\xff.fits"), "wb") as out:
        out.write(b"latin-1 name")
    good = write_file(fed.root / "good.fits", b"a good name")
    await until_queued(store, 1)
    assert good in await queued(store)
    await until_spool_empty(fed)
    assert not fed.task.done()
    status = fed.status()
    assert status.refused + len(await queued(store)) == 2  # the odd name: refused by the daemon, or queued


async def test_an_idle_link_is_not_taken_for_a_silent_push_daemon(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore
) -> None:
    first, second = await push_daemon(), await push_daemon()
    fed = await feeder([(first.host, first.port), (second.host, second.port)], timeout=1.0)
    await asyncio.sleep(1.6)  # idle for longer than the timeout, then a record
    write_file(fed.root / "f", b"after a quiet while")
    await until_queued(store, 1)
    await until_spool_empty(fed)
    notes = fed.status().notes
    assert notes["connected"] == f"{first.host}:{first.port}" and "last_error" not in notes


async def test_a_push_daemon_whose_certificate_is_refused_is_left_for_the_next(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, certs: Certs
) -> None:
    untrusted = await push_daemon(tls_cert=certs.rogue_cert, tls_key=certs.rogue_key)
    trusted = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key)
    fed = await feeder([(untrusted.host, untrusted.port), (trusted.host, trusted.port)],
                       tls=client_tls_context(certs.ca))
    write_file(fed.root / "f", b"over TLS")
    await until_queued(store, 1)
    await until_spool_empty(fed)
    assert fed.status().notes["connected"] == f"{trusted.host}:{trusted.port}"


async def test_a_file_the_feeder_may_not_read_is_looked_at_again_later(
    push_daemon: StartPush, feeder: StartFeeder, store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataq.feed import examine, watch

    refused: list[str] = []
    real = examine._hash_unchanged

    def first_time_refused(path: str, *args: Any) -> str | None:
        if path not in refused:
            refused.append(path)
            raise PermissionError(13, "Permission denied")
        return real(path, *args)

    monkeypatch.setattr(examine, "_hash_unchanged", first_time_refused)
    monkeypatch.setattr(watch, "RETRY_UNREADABLE", 0.5)
    daemon = await push_daemon()
    fed = await feeder([(daemon.host, daemon.port)])
    checksum = write_file(fed.root / "locked.fits", b"mode 0600 at first")
    assert await until_queued(store, 1) == {checksum: str(fed.root / "locked.fits")}
    assert refused == [str(fed.root / "locked.fits")]


async def test_a_watch_feeds_every_file_in_the_activity_it_names(
    feeder: StartFeeder, store: QueueStore, redis_url: str, tmp_path: Path
) -> None:
    queue = QueueSettings(QUEUE, activities={"backfill": ActivitySettings("backfill")})
    daemon = await start_push(replace(push_settings(redis_url, tmp_path / "data"), queues={QUEUE: queue}))
    try:
        fed = await feeder([(daemon.host, daemon.port)], activity="backfill")
        checksum = write_file(fed.root / "a.fits", b"x" * 100)
        assert await until_queued(store, 1) == {checksum: str(fed.root / "a.fits")}
        assert (await store.summary()).activities == {"default": 0, "backfill": 1}
        assert await fed.shutdown() == 0
    finally:
        await daemon.shutdown()
