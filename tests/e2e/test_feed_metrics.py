"""A watching feeder's metrics endpoint, scraped from a real ``dataq feed --watch`` process: its spool, its link
and its replies, as an operator's alerts read them (``[feed] metrics_port``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from dataq.embedded.redis_server import free_port
from dataq.ops.exported import EXPORTED_METRICS
from dataq.store import QueueStore
from testbed.waits import eventually
from tests.feed_support import until_queued, write_file
from tests.push_support import StartPush, dataq_command

ENV = {"DATAQ_CONFIG": "", "PATH": "/usr/bin:/bin"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


@contextlib.asynccontextmanager
async def feeder(tmp_path: Path, push_port: int, metrics_port: int, extra: str = "") -> AsyncIterator[Path]:
    """A ``dataq feed --watch`` process on ``tmp_path/incoming`` (a configured directory), its endpoint up."""
    root = tmp_path / "incoming"
    root.mkdir()
    config = tmp_path / "feeder.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n[log]\ndir = "{tmp_path / "log"}"\n'
                      f'[feed]\ndirectories = ["{tmp_path / "other"}", "{root}"]\nmetrics_port = {metrics_port - 1}\n'
                      f'settle = 0.2\n{extra}')
    process = await asyncio.create_subprocess_exec(
        *dataq_command(), "feed", "--config", str(config), "--port", str(push_port), "--watch", str(root),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=ENV)
    try:
        async def serving() -> bool:
            try:
                await asyncio.to_thread(scrape, metrics_port)
            except (urllib.error.URLError, ConnectionError):
                return False
            return True

        await eventually(serving, what="the feeder's metrics endpoint")
        yield root
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


async def test_a_feeder_exports_its_spool_its_link_and_its_replies_through_an_outage(
    push_daemon: StartPush, store: QueueStore, tmp_path: Path
) -> None:
    push_port, metrics_port = free_port(), free_port()
    # The second configured directory's feeder serves on metrics_port + 1: here, the port given.
    async with feeder(tmp_path, push_port, metrics_port) as root:
        d = {"directory": str(root)}
        for n in range(5):
            write_file(root / f"f{n}", f"file {n}".encode())

        async def spooled() -> bool:
            return value(await asyncio.to_thread(scrape, metrics_port), "dataq_feed_spool_pending_records", **d) == 5

        await eventually(spooled, what="five records pending in the spool")
        await asyncio.sleep(0.5)
        down = await asyncio.to_thread(scrape, metrics_port)
        assert value(down, "dataq_feed_link_up", target=f"127.0.0.1:{push_port}", **d) == 0
        assert value(down, "dataq_feed_spool_oldest_pending_age_seconds", **d) >= 0.5
        assert value(down, "dataq_feed_records_sent_total", **d) == 0
        assert value(down, "dataq_feed_last_success_timestamp_seconds", **d) == 0
        assert value(down, "process_resident_memory_bytes") > 0

        await push_daemon(port=push_port)
        await until_queued(store, 5)

        async def drained() -> bool:
            got = await asyncio.to_thread(scrape, metrics_port)
            return value(got, "dataq_feed_spool_pending_records", **d) == 0

        await eventually(drained, what="the spool to drain")
        up = await asyncio.to_thread(scrape, metrics_port)
        assert value(up, "dataq_feed_link_up", target=f"127.0.0.1:{push_port}", **d) == 1
        assert value(up, "dataq_feed_records_sent_total", **d) == 5
        assert value(up, "dataq_feed_spool_oldest_pending_age_seconds", **d) == 0
        assert time.time() - 30 < value(up, "dataq_feed_last_success_timestamp_seconds", **d) <= time.time()
        families = {name.removesuffix("_total") if name.endswith("_total") else name for name, _ in up}
        assert {name.removesuffix("_total") for name in EXPORTED_METRICS} >= families


async def test_records_a_push_daemon_refuses_are_counted_and_kept_in_the_spool(
    push_daemon: StartPush, tmp_path: Path
) -> None:
    push_port, metrics_port = free_port(), free_port()
    await push_daemon(port=push_port)  # an md5 queue; the feeder reckons sha256, so every record is refused
    async with feeder(tmp_path, push_port, metrics_port, '[queues.transfer]\nchecksum = "sha256"\n') as root:
        d = {"directory": str(root)}
        for n in range(3):
            write_file(root / f"f{n}", f"refused {n}".encode())

        async def refused() -> bool:
            got = await asyncio.to_thread(scrape, metrics_port)
            return value(got, "dataq_feed_spool_refused_records", **d) == 3

        await eventually(refused, what="three refused records in the spool")
        got = await asyncio.to_thread(scrape, metrics_port)
        assert value(got, "dataq_feed_records_refused_total", **d) == 3
        assert value(got, "dataq_feed_records_sent_total", **d) == 0
        assert value(got, "dataq_feed_spool_pending_records", **d) == 0
