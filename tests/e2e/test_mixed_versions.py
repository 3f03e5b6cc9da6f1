"""A cascade whose sites run different versions, as one upgraded site by site does: mountain and archive run
today's dataq, the valley between them dataq 0.1 (before site names, receipts and the handshake), built from this
repository's own history (:mod:`testbed.older`). Records come in today's forms and in the 2014 data-q's; every
file reaches the archive, and no source whose next site cannot answer receipts is ever deleted."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataq.feed.client import Feeder
from dataq.handshake import hello_line
from dataq.protocol import ReplyKind
from dataq.record import Record, format_line
from testbed.cascade import Cascade
from testbed.older import older_python, version_of
from testbed.rsync import LOOPBACK
from testbed.waits import eventually, eventually_equal
from tests.cascade_support import (
    FAST,
    FLOW_TIMEOUT,
    archived,
    custody_count,
    make_sources,
    not_speaking_receipts,
)

pytestmark = pytest.mark.timeout(4 * FLOW_TIMEOUT)
"""Building the older dataq (once per run, some 10 s) and a flow's wait."""


@pytest.fixture(scope="module")
def older() -> Path:
    """The interpreter of dataq 0.1."""
    python = older_python()
    assert version_of(python).startswith("0.1.0 "), "dataq 0.1, from its own files"
    return python


@pytest.fixture
def mixed(tmp_path: Path, older: Path) -> Iterator[Cascade]:
    chain = Cascade(tmp_path, ["mountain", "valley", "archive"], move=FAST, pop={"concurrency": 8},
                    older={"valley": older})
    try:
        chain.start()
        yield chain
    finally:
        chain.stop()


def send_2014_lines(port: int, records: list[Record]) -> list[str]:
    """What a 2014 data-q feeder does: no hello, ``<path> <checksum> <size>`` lines, a reply read for each."""
    with socket.create_connection((LOOPBACK, port), timeout=30) as sock:
        sock.sendall(b"".join((format_line(record) + "\n").encode() for record in records))
        replies = b""
        while replies.count(b"\n") < len(records):
            chunk = sock.recv(65536)
            assert chunk, f"closed after {replies!r}"
            replies += chunk
    return replies.decode().splitlines()


async def test_every_file_crosses_an_older_valley_and_no_source_goes_without_a_receipt(mixed: Cascade,
                                                                                        tmp_path: Path) -> None:
    mountain, valley, archive = mixed.sites
    today = make_sources(tmp_path / "today", 30, prefix="new")
    of_2014 = make_sources(tmp_path / "old", 30, prefix="old")
    feeder = Feeder(LOOPBACK, mountain.port, window=100, retry_for=30.0)
    result = await feeder.feed(today)
    assert result.replies is not None and [reply.kind for reply in result.replies] == [ReplyKind.PUSHED] * 30
    assert feeder.greeting is not None and feeder.greeting.full, "today's push daemon speaks everything"
    replies = await asyncio.to_thread(send_2014_lines, mountain.port, of_2014)
    assert replies == [f"Pushed ID={record.checksum}" for record in of_2014], "a 2014 feeder needs no hello"

    records = today + of_2014
    wanted = {record.checksum for record in records}

    async def all_archived() -> bool:
        return wanted <= archived(archive)

    await eventually(all_archived, timeout=FLOW_TIMEOUT, what="every file at the archive, through the older valley")
    await eventually_equal(lambda: custody_count(mountain), 60, timeout=FLOW_TIMEOUT,
                           what="every record in the mountain's custody")

    await not_speaking_receipts(mountain, f"{LOOPBACK}:{valley.port}")
    await asyncio.sleep(2 * FAST["resend_after"])  # a negative check: still nothing deleted, nothing resent
    assert all(os.path.exists(record.path) for record in records), "after_receipt deletes nothing unanswered"
    assert (await custody_count(mountain)) == 60

    # The valley (0.1) was sent only what it takes: it refused the hellos and nothing else.
    refusals = [line for path in (valley.root / "log").glob("*.log") for line in path.read_text().splitlines()
                if "refused a record line" in line]
    assert refusals and all("'hello'" in line for line in refusals), refusals[:3]


async def test_todays_feeder_against_an_older_push_daemon_sends_the_forms_it_takes(mixed: Cascade,
                                                                                  tmp_path: Path) -> None:
    valley, archive = mixed.sites[1], mixed.last
    records = make_sources(tmp_path / "scan", 10, prefix="scan")
    await asyncio.sleep(1.2)  # settled files: today's feeder would send their identities to a daemon that takes them
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", "from dataq.cli.main import main; main()", "feed", "--host", LOOPBACK,
                         "--port", str(valley.port), "--scan", str(tmp_path / "scan")],
        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, "DATAQ_CONFIG": ""})
    assert done.returncode == 0, done.stderr
    wanted = {record.checksum for record in records}

    async def all_archived() -> bool:
        return wanted <= archived(archive)

    await eventually(all_archived, timeout=FLOW_TIMEOUT, what="every scanned file at the archive")


async def test_an_older_site_refuses_the_hello_as_a_record_and_stores_nothing(mixed: Cascade) -> None:
    valley = mixed.sites[1]
    await eventually(lambda: listening(valley.port), timeout=FLOW_TIMEOUT, what="the valley's push daemon")
    with socket.create_connection((LOOPBACK, valley.port), timeout=30) as sock:
        sock.sendall(hello_line())
        answer = sock.recv(4096)
    assert answer.startswith(b"Error: ") and answer.endswith(b"\n")
    assert valley.python is not None
    listed = await asyncio.to_thread(
        subprocess.run, [str(valley.python), "-I", "-c", "from dataq.cli.console import main; main()", "--config",
                         str(valley.config), "--list", "active"], capture_output=True, text=True, timeout=60,
        check=True)
    assert listed.stdout.strip() == "", "its own console lists nothing pushed"


async def listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(LOOPBACK, port)
    except OSError:
        return False
    writer.close()
    return True
