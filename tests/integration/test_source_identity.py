"""A record's file identity, sent by its feeder, proves the record's checksum while the file keeps it: ``disk_store``
and ``network_move`` then take the file without hashing it with the record's algorithm, hash a file that changed
since, and hash every file with ``source_check = "read"``.

The proof that a file was not hashed is a record whose checksum is not its file's: an action that hashed the file
would refuse it."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dataq.actions import storing
from dataq.actions.files import SourceMismatch
from dataq.actions.registry import load_actions
from dataq.checksum import CHUNK_BYTES
from dataq.config import QueueSettings
from dataq.file_identity import identity_of
from dataq.record import Record
from testbed.actions import action_context
from testbed.rsync import RsyncDaemon
from tests.actions_support import make_file, md5

DATA = b"twilight flat " * 3000
OTHER = b"Twilight flat " * 3000
"""Data of the same size as DATA."""


def build(action: str, options: dict[str, Any], **queue: Any) -> Any:
    """The action as the pop daemon builds it, from a queue's settings."""
    settings = QueueSettings("transfer", actions=(action,), action_options={action: options}, **queue)
    (built,) = load_actions(action_context(settings))
    return built


def fed(record: Record, checksum: str | None = None) -> Record:
    """The record as a feeder sends it for its file as the file is now (and with ``checksum``, a checksum its
    file does not have)."""
    return Record(record.path, checksum or record.checksum, record.size, pushed_at=record.pushed_at,
                  source=record.source, identity=identity_of(os.stat(record.path)))


async def rewritten_in_place(record: Record, data: bytes) -> None:
    # Past the filesystem's time granularity (a tick of the kernel's coarse clock), as a later write would be.
    await asyncio.sleep(0.05)
    with open(record.path, "r+b") as file:
        file.write(data)


def replaced(record: Record, data: bytes) -> None:
    Path(f"{record.path}.new").write_bytes(data)
    os.replace(f"{record.path}.new", record.path)


@dataclass(frozen=True)
class Destination:
    """An action of a queue (its settings given by keyword) and where it puts ``a.fits``."""

    action: Callable[..., Any]
    arrived: Path


@pytest.fixture(params=["disk_store", "network_move"])
def destination(request: pytest.FixtureRequest, daemon: RsyncDaemon, valley: Path, tmp_path: Path) -> Destination:
    if request.param == "network_move":
        return Destination(lambda **queue: build("network_move", {"destination": daemon.url("valley")}, **queue),
                           valley / "a.fits")
    root = tmp_path / "store"
    root.mkdir()
    return Destination(lambda **queue: build("disk_store", {"root": str(root), "layout": "{name}"}, **queue),
                       root / "a.fits")


async def test_an_unchanged_fed_file_is_taken_without_hashing_it(destination: Destination, tmp_path: Path) -> None:
    record = fed(make_file(tmp_path / "incoming", "a.fits", DATA), checksum="f" * 32)
    await destination.action().run(record)
    assert destination.arrived.read_bytes() == DATA


async def test_with_source_check_read_every_file_is_hashed(destination: Destination, tmp_path: Path) -> None:
    record = fed(make_file(tmp_path / "incoming", "a.fits", DATA), checksum="f" * 32)
    with pytest.raises(SourceMismatch, match=f"has checksum {md5(DATA)}; its record says {'f' * 32}"):
        await destination.action(source_check="read").run(record)
    assert not destination.arrived.exists()


@pytest.mark.parametrize("change", ["rewritten in place", "replaced"])
async def test_a_fed_file_that_changed_since_is_hashed_and_refused(change: str, destination: Destination,
                                                                    tmp_path: Path) -> None:
    record = fed(make_file(tmp_path / "incoming", "a.fits", DATA))
    if change == "replaced":
        replaced(record, OTHER)
    else:
        await rewritten_in_place(record, OTHER)
    with pytest.raises(SourceMismatch, match=f"has checksum {md5(OTHER)}; its record says {md5(DATA)}"):
        await destination.action().run(record)
    assert not destination.arrived.exists()


async def test_disk_store_of_a_queue_whose_action_names_another_algorithm_hashes_every_file(tmp_path: Path) -> None:
    # Its feeders compute the queue's checksum, not the action's: their identity proves nothing of it.
    record = fed(make_file(tmp_path / "incoming", "a.fits", DATA), checksum="f" * 64)
    (tmp_path / "store").mkdir()
    action = build("disk_store", {"root": str(tmp_path / "store"), "algorithm": "sha256"},
                   checksum_pattern="[0-9a-f]{64}")
    with pytest.raises(SourceMismatch, match="its record says f"):
        await action.run(record)


async def test_network_move_of_a_sha256_queue_reads_even_an_unchanged_file(daemon: RsyncDaemon,
                                                                           tmp_path: Path) -> None:
    # rsync reports md5 of a copy, not sha256: the one read of the source computes it beside the record's.
    record = fed(make_file(tmp_path / "mountain", "a.fits", DATA), checksum="f" * 64)
    action = build("network_move", {"destination": daemon.url("valley")}, checksum="sha256")
    with pytest.raises(SourceMismatch, match="its record says f"):
        await action.run(record)


def test_disk_store_refuses_a_fed_file_written_while_it_was_copied(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    record = fed(make_file(tmp_path / "incoming", "a.fits", os.urandom(3 * CHUNK_BYTES)))
    reads = []
    real_read = os.read

    def read_then_written(fd: int, length: int) -> bytes:
        chunk = real_read(fd, length)
        if not reads:  # after the copy's first chunk, a writer changes the file's end
            reads.append(fd)
            time.sleep(0.05)
            with open(record.path, "r+b") as file:
                file.seek(2 * CHUNK_BYTES)
                file.write(b"cosmic ray")
        return chunk

    monkeypatch.setattr(storing.os, "read", read_then_written)
    (root := tmp_path / "store").mkdir()
    (outcome,) = storing.store_batch_sync([(record, "a.fits")], str(root), trust_identity=True)
    assert isinstance(outcome, SourceMismatch)
    assert str(outcome) == f"source file {record.path} changed while it was copied"
    assert list(root.iterdir()) == []
