"""Custody across sites, every site a host of its own on loopback (a Redis, an rsync daemon, ``dataq push`` and
``dataq pop``; :mod:`testbed.cascade`): a mountain's source is deleted only once the last site holds the file,
a lost hop is healed by resending, an outage is waited out, and every record can be traced site by site."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dataq.protocol import ReplyKind
from dataq.record import Record
from dataq.store import QueueList
from testbed.cascade import Cascade, Site
from testbed.link import reached
from testbed.rsync import LOOPBACK, rsync_daemon
from testbed.waits import eventually, eventually_equal
from tests.actions_support import OlderPeer, peer_server
from tests.cascade_support import (
    FAST,
    FLOW_TIMEOUT,
    archived,
    cli,
    counters,
    custody_count,
    feed,
    make_sources,
    not_speaking_receipts,
    summary_of,
)

pytestmark = pytest.mark.timeout(3 * FLOW_TIMEOUT)
"""Above a flow's wait, so that a stuck flow fails saying which wait it was (a test takes 15-40 s)."""


class SourceWatch:
    """Checks, while the cascade runs, that no source is gone before the archive holds its file."""

    def __init__(self, records: list[Record], archive: Site) -> None:
        self.records, self.archive = records, archive
        self.early: list[str] = []

    def look(self) -> set[str]:
        gone = {record.checksum for record in self.records if not os.path.exists(record.path)}
        # The archive is read after the sources: a file that arrived in between counts as there before.
        self.early += sorted(gone - archived(self.archive))
        return gone

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.look)
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def watching(records: list[Record], archive: Site) -> AsyncIterator[SourceWatch]:
    watch = SourceWatch(records, archive)
    task = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert watch.early == [], f"sources deleted before the archive held them: {watch.early[:5]}"


@contextlib.contextmanager
def cascade(tmp_path: Path, names: list[str], link: tuple[float, float | None] | None = None) -> Iterator[Cascade]:
    chain = Cascade(tmp_path, names, move=FAST, pop={"concurrency": 16}, link=link)
    try:
        chain.start()
        yield chain
    finally:
        chain.stop()


async def all_delivered(chain: Cascade, records: list[Record], watch: SourceWatch) -> None:
    """Every file at the archive and every source gone (deleted only after its receipt)."""
    wanted = {record.checksum for record in records}

    async def delivered() -> bool:
        return wanted <= archived(chain.last) and await asyncio.to_thread(watch.look) >= wanted

    await eventually(delivered, timeout=FLOW_TIMEOUT, what="every file archived and its source removed")


async def test_three_sites_deliver_every_file_and_a_source_goes_only_once_the_archive_holds_it(
        tmp_path: Path) -> None:
    records = make_sources(tmp_path / "data", 200)
    with cascade(tmp_path, ["mountain", "valley", "archive"]) as chain:
        async with watching(records, chain.last) as watch:
            assert await feed(chain.first, records) == [ReplyKind.PUSHED] * 200
            await all_delivered(chain, records, watch)
        for site in chain.sites[:-1]:
            await eventually_equal(lambda site=site: custody_count(site), 0, what=f"custody at {site.name} empty")
        trace = json.loads(await asyncio.to_thread(cli, chain.first, "--trace", records[7].checksum, "--json"))
        assert [hop["site"] for hop in trace["hops"]] == ["mountain", "valley", "archive"]
        assert [hop["state"] for hop in trace["hops"]] == ["done"] * 3
        assert all(seconds >= 0 for seconds in trace["hop_seconds"][1:])
        text = await asyncio.to_thread(cli, chain.first, "--trace", records[7].checksum)
        assert "3 site(s)" in text and "end to end:" in text
        custody = (await summary_of(chain.first))["custody"]
        assert isinstance(custody, dict)
        assert (custody["records"], custody["receipts_last_hour"], custody["resent"]) == (0, 200, 0)
        assert 0 <= custody["latency_p50_seconds"] <= custody["latency_p99_seconds"] < FLOW_TIMEOUT


async def test_over_a_long_link_every_file_arrives_and_every_receipt_comes_back(tmp_path: Path) -> None:
    # Each hop through the testbed's long link: 40 ms each way, a round trip per connection, 100 Mbit/s.
    records = make_sources(tmp_path / "data", 40)
    with cascade(tmp_path, ["mountain", "valley", "archive"], link=(0.04, 100.0)) as chain:
        async with watching(records, chain.last) as watch:
            assert await feed(chain.first, records) == [ReplyKind.PUSHED] * 40
            await all_delivered(chain, records, watch)
        for site in chain.sites[:-1]:
            await eventually_equal(lambda site=site: custody_count(site), 0, what=f"custody at {site.name} empty")


async def test_the_same_files_fed_again_after_they_are_done_are_ignored_and_moved_once(tmp_path: Path) -> None:
    records = make_sources(tmp_path / "data", 40)
    with cascade(tmp_path, ["mountain", "valley", "archive"]) as chain:
        async with watching(records, chain.last) as watch:
            await feed(chain.first, records)
            await all_delivered(chain, records, watch)
        assert await feed(chain.first, records) == [ReplyKind.IGNORED] * 40
        # The valley got each file once, and so does anyone handing it on again there.
        handed = [Record(f"{chain.sites[1].incoming}/{os.path.basename(r.path)}", r.checksum, r.size) for r in records]
        assert await feed(chain.sites[1], handed) == [ReplyKind.IGNORED] * 40
        assert len(chain.sites[1].rsync.received()) == 40 == len(chain.last.rsync.received())
        assert (await counters(chain.first))["duplicate"] == 40


LINKS = {"loopback": None, "long link": (0.02, None)}
"""Each hop as it is, and through the testbed's long link (20 ms each way, a round trip per connection: kept
short, as every hand-on, receipt and rsync call pays it)."""


@pytest.mark.parametrize("link", LINKS.values(), ids=LINKS)
async def test_a_valley_lost_after_the_hand_on_is_healed_by_resending_and_nothing_is_lost(
        tmp_path: Path, link: tuple[float, float | None] | None) -> None:
    records = make_sources(tmp_path / "data", 200)
    with cascade(tmp_path, ["mountain", "valley", "archive"], link=link) as chain:
        mountain, valley, archive = chain.sites
        valley.pop.kill()  # the valley holds what it is handed: nothing goes further
        async with watching(records, archive) as watch:
            await feed(mountain, records)
            await eventually_equal(lambda: custody_count(mountain), 200, timeout=FLOW_TIMEOUT,
                                   what="every record handed on to the valley")
            assert all(os.path.exists(record.path) for record in records), "no receipt yet, no source deleted"
            held = valley.store()
            try:
                sources = {record.source for record in await held.list_records(QueueList.ACTIVE)}
            finally:
                await held.close()
            assert all(str(source).startswith("mountain@127.0.0.1:") for source in sources), "hand-ons name the site"
            valley.destroy()  # its Redis and its copies gone; a new host, empty, on the same addresses
            valley.start_daemons()
            await all_delivered(chain, records, watch)
        assert (await counters(mountain))["resent"] == 200
        assert archived(archive) == {record.checksum for record in records}


@pytest.mark.parametrize("link", LINKS.values(), ids=LINKS)
async def test_an_archive_down_for_longer_than_resend_after_holds_custody_and_nothing_is_resent(
        tmp_path: Path, link: tuple[float, float | None] | None) -> None:
    records = make_sources(tmp_path / "data", 50)
    with cascade(tmp_path, ["mountain", "valley", "archive"], link=link) as chain:
        mountain, valley, archive = chain.sites
        archive.down()
        async with watching(records, archive) as watch:
            await feed(mountain, records)
            await eventually_equal(lambda: custody_count(mountain), 50, timeout=FLOW_TIMEOUT,
                                   what="every record in the mountain's custody")
            await asyncio.sleep(3 * FAST["resend_after"])  # a negative check: no resend must happen meanwhile
            assert (await counters(mountain)).get("resent", 0) == 0
            assert (await counters(valley)).get("resent", 0) == 0
            custody = (await summary_of(mountain))["custody"]
            assert isinstance(custody, dict) and custody["records"] == 50
            assert "valley" in str(custody["oldest_answer"]), "custody says where the records wait"
            archive.up()
            await all_delivered(chain, records, watch)
        assert (await counters(mountain)).get("resent", 0) == 0


@pytest.mark.parametrize("link", LINKS.values(), ids=LINKS)
async def test_sigkill_of_each_sites_pop_daemon_mid_flow_loses_nothing_and_deletes_nothing_early(
        tmp_path: Path, link: tuple[float, float | None] | None) -> None:
    records = make_sources(tmp_path / "data", 200)
    with cascade(tmp_path, ["mountain", "valley", "archive"], link=link) as chain:
        async with watching(records, chain.last) as watch:
            await feed(chain.first, records)
            for site in chain.sites:
                await eventually(lambda site=site: _has_done(site), timeout=FLOW_TIMEOUT,
                                 what=f"work under way at {site.name}")
                site.pop.signal(signal.SIGKILL)
                site.pop.kill()
                site.pop.start()
            await all_delivered(chain, records, watch)
        assert archived(chain.last) == {record.checksum for record in records}


async def _has_done(site: Site) -> bool:
    return (await counters(site)).get("done", 0) > 0


async def test_a_four_site_chain_delivers_and_traces_every_site(tmp_path: Path) -> None:
    records = make_sources(tmp_path / "data", 50)
    with cascade(tmp_path, ["mountain", "valley", "city", "archive"]) as chain:
        async with watching(records, chain.last) as watch:
            await feed(chain.first, records)
            await all_delivered(chain, records, watch)
        trace = json.loads(await asyncio.to_thread(cli, chain.first, "--trace", records[0].checksum, "--json"))
        assert [hop["site"] for hop in trace["hops"]] == ["mountain", "valley", "city", "archive"]
        assert {hop["state"] for hop in trace["hops"]} == {"done"}


@pytest.mark.parametrize("link", LINKS.values(), ids=LINKS)
async def test_an_older_next_site_keeps_records_in_custody_and_their_sources(
        tmp_path: Path, link: tuple[float, float | None] | None) -> None:
    records = make_sources(tmp_path / "data", 20)
    peer = OlderPeer()
    async with peer_server(peer.serve) as served:
        with rsync_daemon(tmp_path / "rsyncd", {"incoming": tmp_path / "older"}) as daemon, \
                contextlib.ExitStack() as links:
            # The older peer is reached over the link as its records are: a kept link greets it once, and what it
            # says (nothing of receipts) must hold for every hand-on that follows on that connection.
            port = reached(served, link, links)
            destination = f"rsync://{LOOPBACK}:{reached(daemon.port, link, links)}/incoming"
            site = Site(tmp_path, "mountain")
            site.start_services()
            site.write_config(["network_move"], {"network_move": {
                "destination": destination, "next_sites": [f"{LOOPBACK}:{port}"],
                "next_path": "/older/{relpath}", "remove_source": "after_receipt", **FAST}}, {"concurrency": 4}, {})
            site.start_daemons()
            try:
                assert await feed(site, records) == [ReplyKind.PUSHED] * 20
                await eventually_equal(lambda: custody_count(site), 20, timeout=FLOW_TIMEOUT, what="custody of 20")
                await not_speaking_receipts(site, f"{LOOPBACK}:{port}")
                await asyncio.sleep(2 * FAST["resend_after"])  # a negative check: nothing deleted, nothing resent
                assert all(os.path.exists(record.path) for record in records)
                assert (await counters(site)).get("resent", 0) == 0
                assert len(peer.lines) == 20 and not [line for line in peer.lines if line.startswith(b"{")], \
                    "each record taken once, in the 2014 form, never asked for receipts"
            finally:
                site.stop()
