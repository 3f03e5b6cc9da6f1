"""The morning after, on a real three-site chain on loopback (:mod:`testbed.cascade`): 200 files delivered, then
files written at the mountain and never fed, archive copies deleted and damaged, a file dropped into the archive by
hand. Each site's audit classifies every file exactly, the repairs bring every file back intact at the archive,
and a second audit at each site finds nothing but the dark file. A site asks only its next site, which passes the
questions on: a site further on that is down is said so by the site before it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataq.record import Record
from testbed.cascade import Cascade, Site
from testbed.waits import eventually, eventually_equal
from tests.cascade_support import FAST, FLOW_TIMEOUT, archived, custody_count, feed, make_sources

pytestmark = pytest.mark.timeout(4 * FLOW_TIMEOUT)


@contextlib.contextmanager
def keeping_sources(tmp_path: Path) -> Iterator[Cascade]:
    """mountain → valley → archive, every site keeping its sources (an observatory keeps its night's data)."""
    chain = Cascade(tmp_path, ["mountain", "valley", "archive"], move={**FAST, "remove_source": False},
                    pop={"concurrency": 16})
    try:
        chain.start()
        yield chain
    finally:
        chain.stop()


def audit(site: Site, *args: str) -> tuple[int, list[dict[str, str]], dict[str, int], str]:
    """``dataq audit --json`` at ``site``: exit status, findings, the summary's counts, stderr."""
    done = subprocess.run([sys.executable, "-c", "from dataq.cli.main import main; main()", "audit", "--config",
                           str(site.config), "--json", *args], capture_output=True, text=True, timeout=120,
                          check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    summary = lines[-1]["summary"] if lines else {}
    return done.returncode, lines[:-1], summary, done.stderr


def written_last_night(records: list[Record]) -> list[Record]:
    """The files' times set an hour back: written during the night, long settled (the audit leaves alone a file
    changed within [feed] settle, as a feeder does)."""
    when = time.time() - 3600
    for record in records:
        os.utime(record.path, (when, when))
    return records


def copy_at(archive: Site, checksum: str) -> Path:
    (found,) = [path for path in archive.archive.rglob(checksum) if ".dataq" not in path.parts]
    return found


async def delivered(mountain: Site, archive: Site, checksums: set[str]) -> None:
    """Every file at the archive, and every receipt back at the mountain (its custody empty)."""
    async def there() -> bool:
        return checksums <= await asyncio.to_thread(archived, archive)

    await eventually(there, timeout=FLOW_TIMEOUT, what="every file at the archive")
    await eventually_equal(lambda: custody_count(mountain), 0, timeout=FLOW_TIMEOUT,
                           what="every receipt back at the mountain")


async def test_audits_classify_every_file_and_their_repairs_bring_every_file_back(tmp_path: Path) -> None:
    night = tmp_path / "night"
    records = written_last_night(make_sources(night, 200))
    with keeping_sources(tmp_path) as chain:
        mountain, _, archive = chain.sites
        await feed(mountain, records)
        await delivered(mountain, archive, {record.checksum for record in records})
        status, found, summary, _ = audit(mountain, str(night))
        assert (status, found, summary) == (0, [], {"arrived": 200})

        # The morning after: what went wrong overnight.
        never_fed = written_last_night(make_sources(night, 3, prefix="late"))
        missing, damaged = records[:2], records[2]
        for record in missing:
            copy_at(archive, record.checksum).unlink()
        copy_at(archive, damaged.checksum).write_bytes(b"a flipped disk block")
        (archive.archive / "by-hand.fits").write_bytes(b"copied in by hand")

        status, found, summary, _ = audit(mountain, str(night))
        assert status == 1
        assert summary == {"arrived": 197, "lost": 3, "never_fed": 3}
        by_path = {item["path"]: item for item in found}
        assert {item["class"] for item in found} == {"lost", "never_fed"}
        assert {by_path[r.path]["class"] for r in never_fed} == {"never_fed"}
        for record in [*missing, damaged]:
            item = by_path[record.path]
            assert (item["class"], item["id"], item["site"]) == ("lost", record.checksum, "archive")
        assert "is missing" in by_path[missing[0].path]["detail"]
        assert "is corrupt" in by_path[damaged.path]["detail"]

        status, found, summary, _ = audit(archive, "--copies")
        assert status == 1
        assert summary == {"arrived": 197, "corrupt_copy": 1, "dark": 1, "missing_copy": 2}

        # The storing site first (the damaged copy into the quarantine), then the source site.
        assert audit(archive, "--copies", "--repair")[0] == 1
        status, _, summary, _ = audit(mountain, "--repair", str(night))
        assert status == 1 and summary["lost"] == 3 and summary["never_fed"] == 3
        await delivered(mountain, archive, {record.checksum for record in [*records, *never_fed]})

        status, found, summary, _ = audit(mountain, str(night))
        assert (status, found, summary) == (0, [], {"arrived": 203})
        status, found, summary, _ = audit(archive, "--copies", "--deep")
        assert status == 1 and summary == {"arrived": 203, "dark": 1}
        assert [item["class"] for item in found] == ["dark"]
        assert copy_at(archive, damaged.checksum).read_bytes() == Path(damaged.path).read_bytes()


async def test_a_next_site_that_does_not_answer_makes_its_files_unknown_not_lost(tmp_path: Path) -> None:
    night = tmp_path / "night"
    records = written_last_night(make_sources(night, 20))
    with keeping_sources(tmp_path) as chain:
        mountain, valley, archive = chain.sites
        await feed(mountain, records)
        await delivered(mountain, archive, {record.checksum for record in records})
        valley.down()
        status, found, summary, stderr = audit(mountain, str(night))
        assert status == 1 and summary == {"unknown": 20}
        assert all(item["detail"].startswith(f"site 127.0.0.1:{valley.port} did not answer") for item in found)
        assert stderr.count("did not answer") == 1, "said once, not per file"
        missing = audit(mountain, str(tmp_path / "no-such-night"))
        assert missing[0] == 2 and "is not a directory" in missing[3]

        # The archive down: the valley, which passes the mountain's questions on, says so for it.
        valley.up()
        archive.down()
        silent = f"site 127.0.0.1:{archive.port} did not answer"

        async def said_by_the_valley() -> bool:
            status, found, summary, _ = await asyncio.to_thread(audit, mountain, str(night))
            return status == 1 and summary == {"unknown": 20} and all(
                item["detail"].startswith(silent) for item in found)

        await eventually(said_by_the_valley, timeout=FLOW_TIMEOUT, what="the archive said silent by the valley")
