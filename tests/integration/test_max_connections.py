"""``max_connections`` of a destination on a real pop daemon: the batches beyond the limit wait their turn, the pop
daemon's heartbeat names their records, and ``dataq-cli --why`` says a record is held by the limit, not running."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dataq.actions.disk_store import DiskStoreAction
from dataq.actions.registry import load_actions
from dataq.config import QueueSettings
from dataq.errors import ConfigError
from dataq.ops.documents import WAITING_KEY
from dataq.ops.why import WaitCode, why
from dataq.store import QueueStore
from testbed.actions import action_context, run_side_by_side
from testbed.rsync import RsyncDaemon
from testbed.waits import eventually, eventually_equal
from tests.actions_support import make_file
from tests.pop_support import counter, load, pop_daemon, write_config

KIB = 1024
MIB = 1024 * KIB


async def test_records_beyond_max_connections_wait_held_and_then_all_arrive(
        daemon: RsyncDaemon, valley: Path, tmp_path: Path, redis_url: str, store: QueueStore) -> None:
    # Four batches of one 96 KiB file at 64 KiB/s through one connection: each takes 1.5 s, three wait.
    records = [make_file(tmp_path / "night", f"frame-{n}.fits", os.urandom(96 * KIB)) for n in range(4)]
    await store.push_batch(records, source="test")
    destination = daemon.url("valley")
    settings = load(write_config(tmp_path, redis_url, actions=["network_move"], options={"network_move": {
        "destination": destination, "max_connections": 1, "bandwidth": "64K", "batch_size": 1}}))
    async with pop_daemon(settings):
        held: list[str] = []

        async def one_held() -> bool:
            for record in records:
                reason = await why(store, record.checksum, 0)
                if reason.code is WaitCode.HELD:
                    held.append(reason.reason)
                    assert (reason.fields["destination"], reason.fields["max_connections"]) == (destination, 1)
                    return True
            return False

        await eventually(one_held, timeout=10.0, what="--why to say a record waits for a connection")
        assert f"waiting for a connection to {destination}: 1 may be open at once (max_connections)" in held[0]
        await eventually_equal(lambda: counter(store, "done"), 4, timeout=30.0, what="every record done")
    assert sorted(os.listdir(valley)) == [f"frame-{n}.fits" for n in range(4)]


def disk_store(root: Path, **options: Any) -> DiskStoreAction:
    queue = QueueSettings("transfer", actions=("disk_store",), action_options={"disk_store": {
        "root": str(root), **options}})
    (action,) = load_actions(action_context(queue))
    assert isinstance(action, DiskStoreAction)
    return action


async def test_a_disk_store_root_takes_no_more_batches_at_once_than_max_connections(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    records = [make_file(tmp_path / "night", f"frame-{n}.fits", os.urandom(4 * MIB)) for n in range(8)]
    action = disk_store(root, max_connections=1, batch_size=1)
    seen: list[Mapping[str, object]] = []

    async def watch() -> None:
        while True:
            seen.append(action.status())
            await asyncio.sleep(0.002)

    watching = asyncio.create_task(watch())
    try:
        await run_side_by_side(action, records)
    finally:
        watching.cancel()
    waits = [status[WAITING_KEY] for status in seen if status]
    assert waits, "no batch waited for the root"
    # Never more than one batch stored at once (none for the moment between one leaving and the next entering).
    assert all(entry[str(root)]["open"] <= 1 for entry in waits)  # type: ignore[index]
    named = {record_id for entry in waits for record_id in entry[str(root)]["ids"]}  # type: ignore[index, attr-defined]
    assert named <= {record.checksum for record in records}
    assert len([path for path in root.rglob("*") if path.is_file() and ".dataq" not in path.parts]) == 8


def test_max_connections_below_1_is_a_settings_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"queues\.transfer\.disk_store.*max_connections must be at least 1"):
        disk_store(tmp_path, max_connections=0)
