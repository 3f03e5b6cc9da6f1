"""What the cascade tests share (``tests/e2e/test_cascade.py``, ``tests/e2e/test_mixed_versions.py``): source files
with their records, a site's archive, its console, its summary and its custody."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from dataq.feed.client import Feeder
from dataq.protocol import ReplyKind
from dataq.record import Record
from testbed.cascade import Site
from testbed.rsync import LOOPBACK
from testbed.waits import eventually
from tests.actions_support import stored_copies

FAST = {"receipt_interval": 0.3, "resend_after": 3.0, "handon_timeout": 3.0}
"""Custody timings for tests: ask often, resend after 3 s."""
FLOW_TIMEOUT = 120.0


def make_sources(directory: Path, count: int, prefix: str = "c4d") -> list[Record]:
    directory.mkdir(parents=True, exist_ok=True)
    records = []
    for n in range(count):
        data = f"{prefix} {n}\n".encode() + os.urandom(512 + n)
        path = directory / f"{prefix}_{n:05d}.fits"
        path.write_bytes(data)
        records.append(Record(str(path), hashlib.md5(data).hexdigest(), len(data)))
    return records


def archived(site: Site) -> set[str]:
    """The checksums the archive's disk_store holds (its files are named by checksum)."""
    return {path.name for path in stored_copies(site.archive)}


async def summary_of(site: Site) -> dict[str, object]:
    return json.loads(await asyncio.to_thread(cli, site, "--summary", "--json"))  # type: ignore[no-any-return]


async def not_speaking_receipts(site: Site, next_site: str) -> None:
    """Wait until ``--summary`` says that ``next_site`` does not speak receipts, and why (it gave no handshake)."""
    async def reported() -> bool:
        custody = (await summary_of(site)).get("custody")
        return isinstance(custody, dict) and bool(custody["next_sites_not_answering"])

    await eventually(reported, timeout=FLOW_TIMEOUT, what=f"--summary saying why {next_site} is not asked")
    text = await asyncio.to_thread(cli, site, "--summary")
    assert f"next site {next_site}: does not speak receipts" in text
    assert "no handshake" in text, "and says why: what the next site said of itself"


def cli(site: Site, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", "from dataq.cli.console import main; main()", "--config",
                           str(site.config), *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def counters(site: Site) -> dict[str, int]:
    store = site.store()
    try:
        return (await store.summary()).counters
    finally:
        await store.close()


async def custody_count(site: Site) -> int:
    store = site.store()
    try:
        return (await store.summary()).custody
    finally:
        await store.close()


async def feed(site: Site, records: list[Record]) -> list[ReplyKind]:
    result = await Feeder(LOOPBACK, site.port, window=len(records) + 1, retry_for=30.0).feed(records)
    assert result.replies is not None
    return [reply.kind for reply in result.replies]
