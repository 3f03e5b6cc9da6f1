"""archive_ingest on a real local Spark: what reaches the archive and its catalog, and what fails alone."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
pytest.importorskip("astropy", reason="astropy is not installed (pip install 'dataq[spark]')")

from dataq.actions.archive import catalog
from dataq.actions.archive.catalog import Filters
from dataq.actions.archive.catalog_files import data_files
from dataq.actions.archive.ingest import LEASE_NAME
from dataq.errors import ActionError
from dataq.record import Record
from dataq.store import QueueStore
from tests.archive_support import (
    Archive,
    archived_copy,
    leftovers,
    md5,
    write_fits,
    write_plain,
)
from tests.checksum_vectors import ALGORITHMS, VECTORS
from tests.pop_support import QUEUE

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

NIGHTS = {"kp4m": ("mosaic3", "2014-07-08T03:12:45.5"), "ct4m": ("decam", "2014-07-09T06:01:02.25"),
          "wiyn": ("odi", "2014-07-09T23:59:59.0")}


def observation(tmp: Path, n: int, telescope: str) -> Record:
    instrument, date_obs = NIGHTS[telescope]
    return write_fits(tmp / "mtn" / f"{telescope}_{n:03d}.fits", {
        "DATE-OBS": date_obs, "MJD-OBS": 56846.13 + n, "INSTRUME": instrument, "TELESCOP": telescope,
        "OBSERVAT": "KPNO" if telescope != "ct4m" else "CTIO", "OBJECT": f"field{n}", "OBSTYPE": "object",
        "FILTER": "r SDSS", "EXPTIME": 30.0 + n, "RA": "12:34:56.78", "DEC": "-01:02:03.4", "PROPID": "2014B-0001",
    }, seed=n)


async def run_all(action: Any, records: list[Record]) -> list[BaseException | None]:
    """Submit every record at once (as a pop daemon with enough concurrency does); each run's outcome."""
    return await asyncio.gather(*(action.run(record) for record in records), return_exceptions=True)


def rows(spark: Any, archive: Archive) -> list[dict[str, Any]]:
    return catalog.list_rows(spark, str(archive.catalog), limit=10_000)


async def test_fits_and_plain_files_are_copied_by_checksum_and_cataloged_with_their_headers(
        spark: Any, archive: Archive) -> None:
    fits = [observation(archive.tmp, n, telescope) for n, telescope in enumerate(NIGHTS)]
    fits += [observation(archive.tmp, n, "kp4m") for n in range(3, 5)]
    plain = [write_plain(archive.tmp / "mtn" / f"log{n}.txt", f"night log {n}\n".encode() * 300) for n in range(2)]
    async with archive.action(batch_size=len(fits + plain)) as action:
        assert await run_all(action, fits + plain) == [None] * len(fits + plain)

    for record in fits + plain:
        copy = archived_copy(archive.root, record.checksum)
        assert copy.read_bytes() == Path(record.path).read_bytes()
        assert copy.stat().st_mode & 0o777 == 0o444
    found = {row["checksum"]: row for row in rows(spark, archive)}
    assert set(found) == {record.checksum for record in fits + plain}
    decam = found[fits[1].checksum]
    assert (decam["instrument"], decam["telescope"], decam["observatory"], decam["date_obs"]) == \
        ("decam", "ct4m", "CTIO", "2014-07-09T06:01:02.25")
    assert (decam["exptime"], decam["mjd_obs"], decam["ra"], decam["dec"]) == (31.0, 56847.13, "12:34:56.78",
                                                                               "-01:02:03.4")
    assert (decam["object"], decam["filter"], decam["propid"], decam["is_fits"]) == ("field1", "r SDSS",
                                                                                     "2014B-0001", True)
    assert decam["path"] == fits[1].path and decam["size"] == fits[1].size and decam["queue"] == QUEUE
    assert decam["archive_path"] == f"{fits[1].checksum[:2]}/{fits[1].checksum[2:4]}/{fits[1].checksum}"
    assert decam["mtime"].timestamp() == pytest.approx(Path(fits[1].path).stat().st_mtime, abs=1e-3)
    log = found[plain[0].checksum]
    assert (log["is_fits"], log["fits_error"], log["instrument"], log["size"]) == (False, None, None, plain[0].size)
    ingest_dates = {row["ingest_date"] for row in found.values()}
    assert len(ingest_dates) == 1
    assert (archive.catalog / f"ingest_date={ingest_dates.pop().isoformat()}").is_dir()
    assert leftovers(archive.root) == []


async def test_ls_and_stats_select_rows_by_instrument_observation_date_and_checksum(
        spark: Any, archive: Archive) -> None:
    records = [observation(archive.tmp, n, telescope) for n, telescope in enumerate(NIGHTS)]
    async with archive.action(batch_size=len(records)) as action:
        assert await run_all(action, records) == [None] * len(records)
    path = str(archive.catalog)

    decam = catalog.list_rows(spark, path, Filters(instrument="DECam"))
    assert [r["checksum"] for r in decam] == [records[1].checksum]
    on_9th = catalog.list_rows(spark, path, Filters(obs_date=dt.date(2014, 7, 9)))
    assert {r["checksum"] for r in on_9th} == {records[1].checksum, records[2].checksum}
    by_checksum = catalog.list_rows(spark, path, Filters(checksum=records[0].checksum))
    assert [r["instrument"] for r in by_checksum] == ["mosaic3"]
    today = catalog.list_rows(spark, path)[0]["ingest_date"]
    assert len(catalog.list_rows(spark, path, Filters(date=today))) == 3
    assert catalog.list_rows(spark, path, Filters(date=today.replace(year=2000))) == []
    assert len(catalog.list_rows(spark, path, limit=2)) == 2
    (day,) = catalog.stats(spark, path)
    assert (day["ingest_date"], day["files"], day["bytes"], day["fits_files"], day["fits_errors"]) == \
        (today, 3, sum(r.size for r in records), 3, 0)
    per_instrument = catalog.stats(spark, path, by_instrument=True)
    assert [(r["instrument"], r["files"]) for r in per_instrument] == [("decam", 1), ("mosaic3", 1), ("odi", 1)]


async def test_each_algorithm_archives_under_its_digest_and_the_catalog_says_which(spark: Any,
                                                                                  archive: Archive) -> None:
    for algorithm in ALGORITHMS:
        data = b"abc"
        path = archive.tmp / algorithm / "abc.dat"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        record = Record(str(path), VECTORS[algorithm][data], len(data))
        async with archive.action({"checksum": algorithm}, batch_size=1) as action:
            assert await run_all(action, [record]) == [None]
        assert archived_copy(archive.root, record.checksum).read_bytes() == data
    found = {row["checksum"]: row["checksum_algorithm"] for row in rows(spark, archive)}
    assert found == {VECTORS[algorithm][b"abc"]: algorithm for algorithm in ALGORITHMS}


async def test_a_checksum_mismatch_fails_only_that_record_and_leaves_no_copy(spark: Any, archive: Archive) -> None:
    good = [write_plain(archive.tmp / "src" / f"good{n}.dat", os.urandom(4096)) for n in range(3)]
    bad_data = os.urandom(4096)
    bad = write_plain(archive.tmp / "src" / "bad.dat", bad_data)
    wrong = Record(path=bad.path, checksum=md5(bad_data + b"x"), size=bad.size)
    async with archive.action(batch_size=4) as action:
        outcomes = await run_all(action, [good[0], wrong, good[1], good[2]])

    assert outcomes[0] is None and outcomes[2:] == [None, None]
    assert isinstance(outcomes[1], ActionError)
    assert str(outcomes[1]) == f"checksum mismatch: {bad.path} has md5 {bad.checksum}, its record says {wrong.checksum}"
    assert not archived_copy(archive.root, wrong.checksum).exists()
    assert not archived_copy(archive.root, bad.checksum).exists()
    assert {row["checksum"] for row in rows(spark, archive)} == {record.checksum for record in good}
    assert leftovers(archive.root) == []


async def test_a_size_mismatch_a_missing_file_a_directory_and_a_fifo_each_fail_alone(
        spark: Any, archive: Archive) -> None:
    good = write_plain(archive.tmp / "src" / "good.dat", b"fine\n" * 100)
    other = write_plain(archive.tmp / "src" / "other.dat", b"other\n" * 100)
    short = Record(path=other.path, checksum=other.checksum, size=other.size + 1)
    missing = Record(path=str(archive.tmp / "src" / "gone.dat"), checksum=md5(b"gone"), size=4)
    (archive.tmp / "src" / "adir").mkdir()
    directory = Record(path=str(archive.tmp / "src" / "adir"), checksum=md5(b"dir"), size=0)
    os.mkfifo(archive.tmp / "src" / "fifo")  # opening it for reading would block a task forever
    fifo = Record(path=str(archive.tmp / "src" / "fifo"), checksum=md5(b"fifo"), size=0)
    async with archive.action(batch_size=5) as action:
        outcomes = await run_all(action, [short, good, missing, directory, fifo])

    assert outcomes[1] is None
    assert str(outcomes[4]) == f"{fifo.path} is not a regular file"
    assert str(outcomes[0]) == f"size mismatch: {other.path} is {other.size} bytes, its record says {other.size + 1}"
    assert str(outcomes[2]) == f"cannot read {missing.path}: No such file or directory"
    assert str(outcomes[3]) == f"{directory.path} is not a regular file"
    assert [row["checksum"] for row in rows(spark, archive)] == [good.checksum]


async def test_a_corrupt_fits_header_is_archived_as_a_plain_file_with_the_fits_error(
        spark: Any, archive: Archive) -> None:
    # Starts like FITS, but its header has no END card: the bytes are verified, so they are archived anyway.
    cards = b"".join(card.ljust(80).encode() for card in ("SIMPLE  =                    T", "BITPIX  = 16",
                                                          "NAXIS   = 0", "INSTRUME= 'mosaic3'"))
    corrupt = write_plain(archive.tmp / "src" / "corrupt.fits", cards.ljust(2880, b"\x07"))
    bad_exptime = write_fits(archive.tmp / "src" / "odd.fits", {"INSTRUME": "odi", "EXPTIME": "long"})
    async with archive.action(batch_size=2) as action:
        assert await run_all(action, [corrupt, bad_exptime]) == [None, None]

    found = {row["checksum"]: row for row in rows(spark, archive)}
    assert found[corrupt.checksum]["is_fits"] is False
    assert found[corrupt.checksum]["instrument"] is None
    assert "unreadable FITS header" in found[corrupt.checksum]["fits_error"]
    assert archived_copy(archive.root, corrupt.checksum).read_bytes() == Path(corrupt.path).read_bytes()
    # A readable header keeps its other values; the malformed one is left empty and named.
    odd = found[bad_exptime.checksum]
    assert (odd["is_fits"], odd["instrument"], odd["exptime"]) == (True, "odi", None)
    assert odd["fits_error"].startswith("EXPTIME: ")
    named = catalog.list_rows(spark, str(archive.catalog), Filters(fits_errors=True, instrument="odi"))
    assert [r["checksum"] for r in named] == [bad_exptime.checksum]


async def test_reingesting_the_same_files_succeeds_without_a_second_row_or_copy(spark: Any, archive: Archive) -> None:
    records = [write_plain(archive.tmp / "src" / f"f{n}.dat", os.urandom(2048)) for n in range(4)]
    records.append(observation(archive.tmp, 7, "wiyn"))
    async with archive.action(batch_size=len(records)) as action:
        assert await run_all(action, records) == [None] * len(records)
    copies = {r.checksum: archived_copy(archive.root, r.checksum).stat() for r in records}
    files_before = data_files(str(archive.catalog))

    # A new action (a restarted daemon) knows nothing: the catalog itself must say these are archived.
    again = [*records, Record(path=records[0].path, checksum=records[0].checksum, size=records[0].size)]
    async with archive.action(batch_size=len(again)) as action:
        assert await run_all(action, again) == [None] * len(again)
        assert await run_all(action, records[:2]) == [None, None]

    assert sorted(row["checksum"] for row in rows(spark, archive)) == sorted(copies)
    assert data_files(str(archive.catalog)) == files_before
    for checksum, before in copies.items():
        after = archived_copy(archive.root, checksum).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


async def test_a_file_copied_before_a_crash_is_cataloged_on_retry_without_copying_it_again(
        spark: Any, archive: Archive) -> None:
    record = write_plain(archive.tmp / "src" / "f.dat", os.urandom(4096))
    copy = archived_copy(archive.root, record.checksum)
    copy.parent.mkdir(parents=True)
    copy.write_bytes(Path(record.path).read_bytes())  # as a crash between copy and append leaves it
    before = copy.stat()
    async with archive.action(batch_size=1) as action:
        await action.run(record)
    assert [row["checksum"] for row in rows(spark, archive)] == [record.checksum]
    assert (copy.stat().st_ino, copy.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


async def test_two_concurrent_ingesters_of_the_same_files_write_each_checksum_once(
        spark: Any, archive: Archive) -> None:
    records = [write_plain(archive.tmp / "src" / f"f{n:02d}.dat", os.urandom(1024 + n)) for n in range(40)]
    # Two daemons, each with its own batches in its own order: every batch races the other daemon's.
    async with archive.action(batch_size=10) as first, archive.action(batch_size=7) as second:
        outcomes = await asyncio.gather(run_all(first, records), run_all(second, records[::-1]))
    assert outcomes == [[None] * len(records)] * 2
    checksums = [row["checksum"] for row in rows(spark, archive)]
    assert sorted(checksums) == sorted(record.checksum for record in records)
    assert leftovers(archive.root) == []


@contextlib.asynccontextmanager
async def lease_held_elsewhere(redis_url: str) -> AsyncIterator[asyncio.Event]:
    """Another writer (another pop daemon) holds the queue's catalog lease until the event is set."""
    other = QueueStore.from_url(redis_url, QUEUE)
    let_go, holding = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with other.lease(LEASE_NAME, ttl=30, wait=5):
            holding.set()
            await let_go.wait()

    holder = asyncio.create_task(hold())
    try:
        await holding.wait()
        yield let_go
    finally:
        let_go.set()
        await holder
        await other.close()


async def test_the_append_waits_while_another_writer_holds_the_catalog_lease(
        spark: Any, archive: Archive, redis_url: str) -> None:
    record = write_plain(archive.tmp / "src" / "f.dat", os.urandom(1024))
    async with lease_held_elsewhere(redis_url) as let_go, archive.action(batch_size=1) as action:
        run = asyncio.create_task(action.run(record))
        done, _ = await asyncio.wait({run}, timeout=3.0)
        assert not done, "the ingest appended while another writer held the lease"
        assert archived_copy(archive.root, record.checksum).exists()  # copying needs no lease
        assert rows(spark, archive) == []
        let_go.set()
        await asyncio.wait_for(run, 30.0)
    assert [row["checksum"] for row in rows(spark, archive)] == [record.checksum]


async def test_a_writer_that_never_gets_the_lease_fails_its_records_after_the_timeout(
        spark: Any, archive: Archive, redis_url: str) -> None:
    record = write_plain(archive.tmp / "src" / "f.dat", os.urandom(1024))
    async with lease_held_elsewhere(redis_url), archive.action(batch_size=1, timeout=2.0) as action:
        with pytest.raises(ActionError, match=r"catalog append failed: the lease 'archive-catalog' stayed with "
                                              r"another holder for 2 s"):
            await action.run(record)
    assert rows(spark, archive) == []


async def test_records_gathered_by_age_form_one_batch_and_one_spark_job(spark: Any, archive: Archive) -> None:
    records = [write_plain(archive.tmp / "src" / f"f{n:02d}.dat", os.urandom(512)) for n in range(13)]
    jobs = spark.sparkContext.statusTracker()
    async with archive.action(batch_size=100, batch_age=0.5) as action:
        await run_all(action, records[:1])  # warm: the first batch may start the session
        before = len(jobs.getJobIdsForGroup(None))
        assert await run_all(action, records[1:]) == [None] * 12
        processed = len(jobs.getJobIdsForGroup(None)) - before
    # The processing job and the append: a few jobs for the batch of 12, not one per record.
    assert 1 <= processed <= 3
    assert len(data_files(str(archive.catalog))) == 2  # one file per batch (and ingest date)


async def test_every_copy_archived_is_named_in_the_manifest_and_the_copies_audit_finds_the_catalog_no_dark_file(
        spark: Any, archive: Archive) -> None:
    records = [write_plain(archive.tmp / "mtn" / f"log{n}.txt", f"night log {n}\n".encode() * 100) for n in range(4)]
    async with archive.action(batch_size=len(records)) as action:
        assert await run_all(action, records) == [None] * len(records)
        assert await run_all(action, records[:1]) == [None], "archived before: named again, as a retry may need"
    names = sorted(path.name for path in (archive.root / ".dataq" / "manifests").iterdir())
    assert len(names) == 1 and names[0].startswith("manifest-md5-")
    checked = subprocess.run(["md5sum", "--strict", "-c", f".dataq/manifests/{names[0]}"], cwd=archive.root,
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and checked.stdout.count(": OK") == len(records) + 1, checked.stdout
    config = archive.config()
    audited = subprocess.run([sys.executable, "-c", "from dataq.cli.main import main; main()", "audit", "--config",
                              str(config), "--copies", "--json"], capture_output=True, text=True, check=False)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert json.loads(audited.stdout.splitlines()[-1]) == {"summary": {"arrived": len(records)}}
    archived_copy(archive.root, records[0].checksum).chmod(0o644)
    archived_copy(archive.root, records[0].checksum).unlink()
    missing = subprocess.run([sys.executable, "-c", "from dataq.cli.main import main; main()", "audit", "--config",
                              str(config), "--copies", "--json"], capture_output=True, text=True, check=False)
    assert missing.returncode == 1
    assert json.loads(missing.stdout.splitlines()[-1]) == {"summary": {"arrived": 3, "missing_copy": 1}}
