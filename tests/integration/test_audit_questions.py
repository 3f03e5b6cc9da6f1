"""Audit questions over the wire: a push daemon answers what its site holds of each record, its stored copy
included, and a peer older than the question is one silence, not a lost file."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataq.actions import storing
from dataq.audit.chain import Silent, asker, walk
from dataq.audit.copy_index import index_file
from dataq.audit.questions import Answer, CopyState, SiteState
from dataq.config import QueueSettings
from dataq.custody.client import NotSpoken
from dataq.store import QueueStore
from tests.actions_support import OlderPeer, empty_root, make_file
from tests.push_support import LOOPBACK, QUEUE, RunningPush, push_settings, start_push

NEXT = "127.0.0.1:1"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return empty_root(tmp_path)


@pytest.fixture
async def archive(redis_url: str, tmp_path: Path, root: Path) -> AsyncIterator[RunningPush]:
    """The push daemon of site "archive", whose queue stores under ``root`` and hands on to :data:`NEXT`."""
    settings = push_settings(redis_url, tmp_path / "data")
    queue = QueueSettings(QUEUE, actions=("disk_store", "network_move"), action_options={
        "disk_store": {"root": str(root)}, "network_move": {"destination": "/tmp", "next_sites": [NEXT],
                                                    "next_path": "/tmp/{name}"}})
    daemon = await start_push(dataclasses.replace(settings, site="archive", queues={QUEUE: queue}))
    yield daemon
    await daemon.shutdown()


async def test_a_storing_site_answers_each_record_with_its_state_and_its_copy(
        archive: RunningPush, store: QueueStore, root: Path, tmp_path: Path) -> None:
    kept, gone, damaged, running, never = [make_file(tmp_path / "valley", f"{n}.fits", b"frame %d " % n * 100)
                                           for n in range(5)]
    storing.store_batch_sync([(r, Path(r.path).name) for r in (kept, gone, damaged)], str(root))
    await store.push_batch([kept, gone, damaged, running], source="valley")
    await store.heartbeat("pop", {"role": "pop"}, {"running": 0}, 30.0)
    claimed = (await store.claim("pop", 3)).records
    assert all(await store.ack("pop", [(r.checksum, "") for r in claimed]))
    (root / Path(gone.path).name).unlink()
    (root / Path(damaged.path).name).write_bytes(b"short")

    ask = asker("mountain", None, 5.0)
    answers = await ask(f"{LOOPBACK}:{archive.port}", [r.checksum for r in (kept, gone, damaged, running, never)])
    by_id = {answer.record_id: answer for answer in answers}
    assert (by_id[kept.checksum].state, by_id[kept.checksum].copy) == (SiteState.DONE, CopyState.PRESENT)
    assert by_id[kept.checksum].path == str(root / Path(kept.path).name)
    assert by_id[gone.checksum].copy is CopyState.MISSING
    assert by_id[damaged.checksum].copy is CopyState.CORRUPT
    assert (by_id[running.checksum].state, by_id[running.checksum].copy) == (SiteState.QUEUED, None)
    assert (by_id[never.checksum].state, by_id[never.checksum].copy) == (SiteState.UNKNOWN, None)
    assert all(answer.site == "archive" and answer.next_sites == (NEXT,) for answer in answers)


async def test_an_id_the_queue_refuses_is_answered_with_an_error_in_its_place(archive: RunningPush) -> None:
    reader, writer = await asyncio.open_connection(LOOPBACK, archive.port)
    try:
        writer.write(b'{"audit": ["not-an-md5", "' + b"0" * 32 + b'"], "site": "m"}\n{"audit": 7}\n')
        await writer.drain()
        lines = [await reader.readline() for _ in range(3)]
    finally:
        writer.close()
    assert lines[0].startswith(b"Error: audit: checksum 'not-an-md5' does not match")
    assert lines[1].startswith(b'{"id":"' + b"0" * 32 + b'","audit":"unknown"')
    assert lines[2] == b"Error: audit: 'audit' must be a list of ids\n"


async def test_a_site_older_than_audit_questions_is_one_silence_said_as_such() -> None:
    peer = OlderPeer()
    server = await asyncio.start_server(peer.serve, LOOPBACK, 0)
    address = f"{LOOPBACK}:{server.sockets[0].getsockname()[1]}"
    try:
        ask = asker("mountain", None, 2.0)
        with pytest.raises(NotSpoken, match="does not speak audit"):
            await ask(address, ["0" * 32])
        first = {"0" * 32: Answer("0" * 32, SiteState.DONE, "mountain", (address,))}
        (journey,) = (await walk(first, ask)).values()
        assert isinstance(journey[-1], Silent) and journey[-1].older and journey[-1].site == address
        assert peer.lines == [], "nothing but the hello was sent to it"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_site_that_cannot_read_its_manifests_says_copy_unknown_and_keeps_serving(
        archive: RunningPush, store: QueueStore, root: Path, tmp_path: Path) -> None:
    (record,) = [make_file(tmp_path / "valley", "a.fits", b"frame " * 100)]
    storing.store_batch_sync([(record, "a.fits")], str(root))
    Path(index_file(str(tmp_path / "data"), str(root))).mkdir(parents=True)  # no database can open there
    ask = asker("mountain", None, 5.0)
    (answer,) = await ask(f"{LOOPBACK}:{archive.port}", [record.checksum])
    assert answer.copy is CopyState.UNKNOWN
    (again,) = await ask(f"{LOOPBACK}:{archive.port}", [record.checksum])
    assert again.copy is CopyState.UNKNOWN, "the push daemon still answers"


async def test_a_copy_stored_after_a_question_is_named_in_the_next_answer(
        archive: RunningPush, root: Path, tmp_path: Path) -> None:
    (record,) = [make_file(tmp_path / "valley", "late.fits", b"late frame " * 100)]
    ask = asker("mountain", None, 5.0)
    (before,) = await ask(f"{LOOPBACK}:{archive.port}", [record.checksum])
    assert before.copy is None
    storing.store_batch_sync([(record, "late.fits")], str(root))
    (after,) = await ask(f"{LOOPBACK}:{archive.port}", [record.checksum])
    assert (after.copy, after.path) == (CopyState.PRESENT, str(root / "late.fits"))
