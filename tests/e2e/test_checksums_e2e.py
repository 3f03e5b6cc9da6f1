"""Each checksum algorithm end to end, with real processes on loopback (:mod:`testbed.cascade`): ``dataq feed
--scan`` computes the queue's algorithm, the push daemon checks it, ``network_move`` verifies and hands on with
it, and the next site's ``disk_store`` stores each file under the published digest of its bytes. Sites or
feeders that disagree on the algorithm are refused with an error that names it."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from dataq.store import QueueList
from testbed.cascade import Cascade, Site
from testbed.waits import eventually, eventually_equal
from tests.actions_support import stored_copies
from tests.checksum_vectors import ALGORITHMS, VECTORS
from tests.push_support import dataq_command

FAST = {"receipt_interval": 0.3, "resend_after": 3.0, "handon_timeout": 3.0}
TIMEOUT = 90.0


@contextmanager
def chain(tmp_path: Path, **queues: dict[str, str]) -> Iterator[Cascade]:
    sites = Cascade(tmp_path, ["mountain", "valley"], move=FAST, queues=queues)
    try:
        sites.start()
        yield sites
    finally:
        sites.stop()


def feed_scan(site: Site, directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*dataq_command(), "feed", "--config", str(site.config), "--scan", str(directory)],
                          capture_output=True, text=True, timeout=60, check=False)


def stored_names(site: Site) -> set[str]:
    return {path.name for path in stored_copies(site.archive)}


async def counter(site: Site, name: str) -> int:
    store = site.store()
    try:
        return (await store.summary()).counters.get(name, 0)
    finally:
        await store.close()


class Vector(NamedTuple):
    path: Path
    data: bytes


def known_files(directory: Path, algorithm: str) -> dict[str, Vector]:
    """The vectors' bytes as files, by their published digest (the bytes kept: the cascade deletes each source once
    the end of the chain holds it)."""
    directory.mkdir(parents=True)
    files = {}
    for n, (data, digest) in enumerate(VECTORS[algorithm].items()):
        path = directory / f"vector{n}.fits"
        path.write_bytes(data)
        files[digest] = Vector(path, data)
    return files


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_each_algorithm_carries_its_published_digests_from_the_feeder_to_the_next_sites_store(
        tmp_path: Path, algorithm: str) -> None:
    files = known_files(tmp_path / "night", algorithm)
    with chain(tmp_path, mountain={"checksum": algorithm}, valley={"checksum": algorithm}) as sites:
        fed = await asyncio.to_thread(feed_scan, sites.first, tmp_path / "night")
        assert fed.returncode == 0, fed.stderr
        assert fed.stdout.startswith(f"pushed {len(files)}, ignored 0, errors 0"), fed.stdout

        async def stored() -> bool:
            return await asyncio.to_thread(stored_names, sites.last) == set(files)

        await eventually(stored, timeout=TIMEOUT, what=f"the {algorithm} vectors stored under their digests")
        await eventually_equal(lambda: counter(sites.first, "done"), len(files), timeout=TIMEOUT,
                               what="every record done at the mountain")
        for digest, (path, data) in files.items():
            (copy,) = sites.last.archive.rglob(digest)
            assert copy.read_bytes() == data
            assert (sites.last.incoming / path.name).read_bytes() == data


async def test_a_site_whose_queue_uses_another_algorithm_refuses_the_hand_on_naming_both(tmp_path: Path) -> None:
    # md5 and xxh128 digests look alike (32 hex digits): without the name, the valley would take md5 as xxh128.
    files = known_files(tmp_path / "night", "md5")
    with chain(tmp_path, valley={"checksum": "xxh128"}) as sites:
        fed = await asyncio.to_thread(feed_scan, sites.first, tmp_path / "night")
        assert fed.returncode == 0, fed.stderr
        await eventually_equal(lambda: counter(sites.first, "failed"), len(files), timeout=TIMEOUT,
                               what="every hand-on refused")
        store = sites.first.store()
        try:
            inactive = await store.list_records(QueueList.INACTIVE)
            assert {record.checksum for record in inactive} == set(files)
            state = await store.record_state(inactive[0].checksum)
        finally:
            await store.close()
        assert state is not None and "checksum algorithm 'md5' is not this queue's: its checksums are xxh128" in \
            (state.last_error or ""), state
        assert all(vector.path.exists() for vector in files.values()), "no source goes when the next site refused it"
        assert stored_names(sites.last) == set()


async def test_a_feeder_computing_another_algorithm_is_refused_by_the_push_daemon_naming_its_own(
        tmp_path: Path) -> None:
    known_files(tmp_path / "night", "xxh128")
    with chain(tmp_path, mountain={"checksum": "sha256"}) as sites:
        feeder = tmp_path / "feeder.toml"
        port = sites.first.port
        feeder.write_text(f'[queues.transfer]\nchecksum = "xxh128"\npush_port = {port}\n[push]\nhost = "127.0.0.1"\n')
        done = await asyncio.to_thread(subprocess.run, [*dataq_command(), "feed", "--config", str(feeder), "--scan",
                                                        str(tmp_path / "night")], capture_output=True, text=True,
                                       timeout=60, check=False)
        assert done.returncode == 1
        # A file a second old carries its identity, and its line the feeder's algorithm, which the daemon refuses
        # by name; a younger one's checksum fails the queue's pattern. Either way the daemon names its own.
        assert re.search(r"of this queue's sha256 checksums|its checksums are sha256", done.stderr), done.stderr
        assert done.stdout.startswith("pushed 0, ignored 0, errors 2"), done.stdout
