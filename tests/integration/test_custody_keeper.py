"""The custody keeper of ``network_move`` against a real next site (a push daemon on a Redis of its own): what it
does with each answer, with an outage, and when receipts are overdue."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataq.custody.keeper import CustodyKeeper, KeeperOptions, remove_if_unchanged
from dataq.embedded.redis_server import free_port
from dataq.ops.notices import KIND_RECEIPT_OVERDUE, Notice
from dataq.record import Record
from dataq.store import CustodyEntry, QueueStore
from tests.conftest import MakeRedis
from tests.helpers import make_records
from tests.push_support import LOOPBACK, QUEUE, RunningPush, StartPush

RESEND_AFTER = 60.0


class Notices:
    def __init__(self) -> None:
        self.posted: list[Notice] = []

    def post(self, notice: Notice) -> None:
        self.posted.append(notice)


@pytest.fixture
async def next_site(make_redis: MakeRedis, push_daemon: StartPush) -> AsyncIterator[tuple[RunningPush, QueueStore]]:
    server = make_redis()
    daemon = await push_daemon(url=server.url)
    store = QueueStore.from_url(server.url, QUEUE)
    yield daemon, store
    await store.close()


def keeper(store: QueueStore, sites: tuple[str, ...], notices: Notices, *, alarm: float = 86_400.0,
           after_receipt: bool = True) -> CustodyKeeper:
    options = KeeperOptions(sites, "mountain", 10.0, RESEND_AFTER, alarm, 5.0, after_receipt, QUEUE)
    return CustodyKeeper(store, options, tls=None, remove_source=remove_if_unchanged, notifier=notices)


def source(tmp_path: Path, name: str) -> tuple[Record, tuple[int, ...]]:
    path = tmp_path / name
    path.write_bytes(name.encode())
    info = os.stat(path)
    record = Record(str(path), make_records(1)[0].checksum, info.st_size, pushed_at=time.time())
    return record, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


async def test_a_next_site_that_cannot_be_reached_is_an_outage_and_nothing_is_resent(
        store: QueueStore, tmp_path: Path) -> None:
    record, identity = source(tmp_path, "a.fits")
    long_ago = time.time() - 10 * RESEND_AFTER
    site = f"{LOOPBACK}:{free_port()}"
    await store.keep([CustodyEntry(record, site, long_ago, identity=identity)], first_ask=long_ago)
    watcher = keeper(store, (site,), Notices())
    await watcher.round()
    summary = await store.summary()
    assert (summary.custody, summary.counters.get("resent", 0), summary.tracked) == (1, 0, 0)
    assert os.path.exists(record.path)
    assert site in watcher.down and await store.custody_due(10) == [], "asked again later, not at once"


async def test_unknown_at_the_next_site_is_asked_again_then_resent_after_resend_after(
        store: QueueStore, tmp_path: Path, next_site: tuple[RunningPush, QueueStore]) -> None:
    daemon, _ = next_site
    record, identity = source(tmp_path, "b.fits")
    site = f"{LOOPBACK}:{daemon.port}"
    now = time.time()
    await store.keep([CustodyEntry(record, site, now, identity=identity)], first_ask=now)
    watcher = keeper(store, (site,), Notices())
    await watcher.round(now=now + 1)
    entry = (await store.custody([record.checksum]))[record.checksum]
    assert entry.last is not None and entry.last.receipt == "unknown"
    assert entry.last.describe().startswith("unknown at ")
    assert (await store.summary()).tracked == 0, "not resent before resend_after"
    await watcher.round(now=now + RESEND_AFTER + 20)
    summary = await store.summary()
    assert (summary.tracked, summary.custody, summary.counters["resent"]) == (1, 1, 1)
    assert os.path.exists(record.path), "resent from its source, which is still there"


async def test_done_deletes_the_source_only_if_it_is_still_the_file_that_was_sent(
        store: QueueStore, tmp_path: Path, next_site: tuple[RunningPush, QueueStore]) -> None:
    daemon, far = next_site
    site = f"{LOOPBACK}:{daemon.port}"
    kept, kept_identity = source(tmp_path, "kept.fits")
    (far_record,) = make_records(1)
    await far.push_batch([far_record], source="test")
    await far.heartbeat("w", {}, {}, 10.0)
    await far.claim("w", 1)
    await far.ack("w", [(far_record.checksum, "")])
    now = time.time()
    await store.keep([CustodyEntry(kept, site, now, identity=kept_identity)], first_ask=now)
    os.utime(kept.path, ns=(1, 1))  # another file now: its times changed
    await keeper(store, (site,), Notices()).round(now=now + 1)
    assert os.path.exists(kept.path), "a file that is not the one sent is never deleted"
    assert (await store.summary()).custody == 0

    gone, identity = source(tmp_path, "gone.fits")
    await store.keep([CustodyEntry(gone, site, now, identity=identity)], first_ask=now)
    await keeper(store, (site,), Notices()).round(now=now + 1)
    assert not os.path.exists(gone.path)
    assert (await store.summary()).custody == 0


async def test_records_waiting_for_their_receipt_past_receipt_alarm_make_a_notice(
        store: QueueStore, tmp_path: Path) -> None:
    record, identity = source(tmp_path, "late.fits")
    site = f"{LOOPBACK}:{free_port()}"
    await store.keep([CustodyEntry(record, site, time.time() - 120, identity=identity)], first_ask=time.time() + 60)
    notices = Notices()
    watcher = keeper(store, (site,), notices, alarm=60.0)
    await watcher.round()
    await watcher.round()
    assert [notice.kind for notice in notices.posted] == [KIND_RECEIPT_OVERDUE], "one notice, not one per round"
    details = notices.posted[0].details
    assert details["examples"][0]["id"] == record.checksum  # type: ignore[index]
    assert f"--trace {record.checksum}" in str(details["see"])


async def test_a_source_that_cannot_be_removed_stays_and_the_rest_of_the_round_is_settled(
        store: QueueStore, tmp_path: Path, next_site: tuple[RunningPush, QueueStore]) -> None:
    daemon, far = next_site
    site = f"{LOOPBACK}:{daemon.port}"
    (far_record,) = make_records(1)
    await far.push_batch([far_record], source="test")
    await far.heartbeat("w", {}, {}, 10.0)
    await far.claim("w", 1)
    await far.ack("w", [(far_record.checksum, "")])
    stuck = tmp_path / "stuck.fits"
    stuck.mkdir()  # unlink fails on it (EISDIR), whoever runs the test
    info = os.stat(stuck)
    record = Record(str(stuck), far_record.checksum, 1, pushed_at=time.time())
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    now = time.time()
    await store.keep([CustodyEntry(record, site, now, identity=identity)], first_ask=now)
    await keeper(store, (site,), Notices()).round(now=now + 1)
    assert stuck.exists()
    assert (await store.summary()).custody == 0, "the chain holds the file: custody ends all the same"
