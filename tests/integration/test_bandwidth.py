"""network_move's bandwidth against a real rsync daemon: each rsync call takes the limit over the calls it opens at
once at most (four), so the transfers together never take more, and a timetable's limit is the one of the time of
day.

The tests check only that the limit holds (a transfer takes at least 0.85 of the time the limit allows: no slow
machine makes that fail); each call's share is checked in ``tests/unit/test_rsync_connections.py``, and how
closely rsync keeps to the limit is measured by ``bench/bandwidth.py``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from dataq.actions.network_move import NetworkMoveAction
from dataq.actions.registry import load_actions
from dataq.config import QueueSettings
from dataq.record import Record
from testbed.actions import action_context, run_side_by_side
from testbed.rsync import RsyncDaemon
from tests.actions_support import make_file, md5

MIB = 1024 ** 2


def move(**options: Any) -> NetworkMoveAction:
    queue = QueueSettings("transfer", actions=("network_move",), action_options={"network_move": options})
    (action,) = load_actions(action_context(queue))
    assert isinstance(action, NetworkMoveAction)
    return action


def files(directory: Path, count: int, size: int) -> list[Record]:
    return [make_file(directory, f"frame-{n}.fits", os.urandom(size)) for n in range(count)]


async def test_one_transfer_takes_its_share_of_the_limit(daemon: RsyncDaemon, valley: Path, tmp_path: Path) -> None:
    (record,) = files(tmp_path / "night", 1, 3 * MIB)
    seconds = await run_side_by_side(move(destination=daemon.url("valley"), bandwidth="4M"), [record])
    assert seconds >= 3 * 0.85, f"3 MiB at a quarter of 4 MiB/s took {seconds:.2f} s"
    assert md5((valley / "frame-0.fits").read_bytes()) == record.checksum


async def test_transfers_at_once_share_the_limit(daemon: RsyncDaemon, valley: Path, tmp_path: Path) -> None:
    # Four batches of one file each (batch_size 1), sent side by side: 8 MiB in all at 4 MiB/s together.
    records = files(tmp_path / "night", 4, 2 * MIB)
    seconds = await run_side_by_side(move(destination=daemon.url("valley"), bandwidth="4M", batch_size=1), records)
    assert seconds >= 2 * 0.85, f"8 MiB at 4 MiB/s together took {seconds:.2f} s"


async def test_a_timetable_limits_by_the_time_of_day(daemon: RsyncDaemon, tmp_path: Path) -> None:
    (record,) = files(tmp_path / "night", 1, 2 * MIB)
    now = time.localtime()
    earlier = time.strftime("%H:%M", time.localtime(time.time() - 60))
    later = time.strftime("%H:%M", time.localtime(time.time() + 3600))
    table = f"{earlier},4M {later},off" if later > earlier else f"{later},off {earlier},4M"
    seconds = await run_side_by_side(move(destination=daemon.url("valley"), bandwidth=table), [record])
    assert seconds >= 2 * 0.85, f"2 MiB at a quarter of this hour's 4 MiB/s took {seconds:.2f} s ({now})"
