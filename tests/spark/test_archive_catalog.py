"""What an astronomer finds in the archive catalog: compressed and multi-extension files ingested on a real local
Spark, found by observation time, object and telescope, and counted by night."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
pytest.importorskip("astropy", reason="astropy is not installed (pip install 'dataq[spark]')")

import numpy as np
from astropy.io import fits

from dataq.cli.archive import archive as archive_cli
from dataq.record import Record
from tests.archive_support import TEST_MASTER, Archive, astropy_sample, record_for, write_plain

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

def fpacked(path: Path, cards: dict[str, Any]) -> Record:
    pixels = np.arange(256 * 256, dtype=np.int32).reshape(256, 256)
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(pixels, header=fits.Header(cards),
                                                      compression_type="RICE_1")]).writeto(path)
    return record_for(path)


def mosaic(path: Path, primary: dict[str, Any], chips: int) -> Record:
    extensions = [fits.ImageHDU(np.full((16, 16), n, dtype=np.int16), name=f"CCD{n}") for n in range(1, chips + 1)]
    fits.HDUList([fits.PrimaryHDU(header=fits.Header(primary)), *extensions]).writeto(path)
    return record_for(path)


@pytest.fixture
def night(archive: Archive) -> dict[str, Record]:
    """A night's worth of files, as an archive receives them from several instruments and decades."""
    source = archive.tmp / "src"
    source.mkdir(parents=True)
    return {
        # DATE-OBS '19/05/94' with TIME-OBS 15:41:16, and 4 extensions
        "wfpc2": record_for(astropy_sample("test0.fits", source)),
        # its date only in the first image extension
        "stis": record_for(astropy_sample("o4sp040b0_raw.fits", source)),
        "m51": fpacked(source / "k4m_140708_031245_ooi_r.fits.fz",
                       {"DATE-OBS": "2014-07-08T03:12:45.5", "INSTRUME": "mosaic3", "TELESCOP": "kp4m",
                        "OBJECT": "M 51 center", "EXPTIME": 300.0}),
        "decam": mosaic(source / "c4d_140709_060000_ori.fits",
                        {"MJD-OBS": 56847.25, "INSTRUME": "decam", "TELESCOP": "ct4m", "OBJECT": "SN field 7",
                         "EXPTIME": 90.0}, chips=3),
        "log": write_plain(source / "night.log", b"clear all night\n"),
    }


def invoke(*args: str) -> Any:
    return CliRunner().invoke(archive_cli, list(args), catch_exceptions=False)


def listed(archive: Archive, *args: str) -> list[dict[str, Any]]:
    result = invoke("ls", "--config", str(archive.config()), "--master", TEST_MASTER, "--json", *args)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


async def ingest(archive: Archive, records: list[Record]) -> None:
    async with archive.action(batch_size=len(records)) as action:
        assert await asyncio.gather(*(action.run(record) for record in records)) == [None] * len(records)


async def test_compressed_and_multi_extension_files_are_cataloged_with_extensions_and_utc_times(
        archive: Archive, night: dict[str, Record]) -> None:
    await ingest(archive, list(night.values()))
    rows = {row["path"]: row for row in listed(archive)}
    wfpc2, stis, m51, decam, log = (rows[night[name].path] for name in ("wfpc2", "stis", "m51", "decam", "log"))
    assert (wfpc2["date_obs"], wfpc2["time_obs"], wfpc2["obs_time"], wfpc2["extensions"]) == \
        ("19/05/94", "15:41:16", "1994-05-19T15:41:16+00:00", 4)
    assert (stis["instrument"], stis["object"], stis["obs_time"], stis["extensions"]) == \
        ("STIS", "HD101998", "1998-04-20T18:38:15+00:00", 6)
    assert (m51["object"], m51["extensions"], m51["obs_time"], m51["is_fits"]) == \
        ("M 51 center", 1, "2014-07-08T03:12:45.500000+00:00", True)
    assert m51["mjd_obs"] == pytest.approx(56846.13386, abs=1e-5)  # computed: the header has no MJD-OBS
    assert (decam["obs_time"], decam["date_obs"], decam["extensions"]) == ("2014-07-09T06:00:00+00:00", None, 3)
    assert (log["is_fits"], log["extensions"], log["obs_time"]) == (False, None, None)


async def test_ls_finds_files_by_observation_date_time_range_object_and_telescope(
        archive: Archive, night: dict[str, Record]) -> None:
    await ingest(archive, list(night.values()))

    def paths(*args: str) -> set[str]:
        return {row["path"] for row in listed(archive, *args)}

    assert paths("--obs-date", "1994-05-19") == {night["wfpc2"].path}  # the old DD/MM/YY form
    assert paths("--since", "2014-07-08", "--until", "2014-07-09T06:00") == {night["m51"].path}
    assert paths("--since", "2014-07-08T03:12:46") == {night["decam"].path}
    assert paths("--until", "2000-01-01") == {night["wfpc2"].path, night["stis"].path}
    assert paths("--object", "m 51") == {night["m51"].path}
    assert paths("--object", "FIELD", "--telescope", "CT4M") == {night["decam"].path}
    assert paths("--telescope", "kp4m", "--object", "field") == set()

    backwards = invoke("ls", "--config", str(archive.config()), "--since", "2014-07-09", "--until", "2014-07-08")
    assert backwards.exit_code == 2
    assert "--until 2014-07-08T00:00:00 is not after --since 2014-07-09T00:00:00" in backwards.output
    not_a_time = invoke("ls", "--config", str(archive.config()), "--since", "last night")
    assert not_a_time.exit_code == 2 and "'last night' does not match the formats" in not_a_time.output


async def test_stats_count_files_and_exposure_per_observing_night_and_instrument(
        archive: Archive, night: dict[str, Record]) -> None:
    await ingest(archive, list(night.values()))
    common = ["stats", "--config", str(archive.config()), "--master", TEST_MASTER]

    # Kitt Peak keeps UTC-7 all year: a night is named after the local date it began on.
    arizona = invoke(*common, "--by-night", "--utc-offset", "-7", "--json")
    assert arizona.exit_code == 0, arizona.output
    nights = {row["night"]: row for row in map(json.loads, arizona.stdout.splitlines())}
    assert set(nights) == {None, "1994-05-18", "1998-04-19", "2014-07-07", "2014-07-08"}
    assert (nights["2014-07-07"]["files"], nights["2014-07-07"]["exptime"]) == (1, 300.0)
    assert nights[None]["files"] == 1  # the night log has no observation time
    utc_nights = {json.loads(line)["night"] for line in invoke(*common, "--by-night", "--json").stdout.splitlines()}
    assert "1994-05-19" in utc_nights  # 15:41 UTC is after noon: the night of the 19th

    table = invoke(*common, "--by-night", "--by-instrument", "--utc-offset", "-7")
    assert table.exit_code == 0, table.output
    header, *lines = table.stdout.splitlines()
    assert header.split()[:4] == ["night", "instrument", "files", "bytes"]
    assert [line.split()[:3] for line in lines] == [["-", "-", "1"], ["1994-05-18", "WFPC2", "1"],
                                                    ["1998-04-19", "STIS", "1"], ["2014-07-07", "mosaic3", "1"],
                                                    ["2014-07-08", "decam", "1"]]


async def test_the_sites_utc_offset_comes_from_the_queue_settings(archive: Archive,
                                                                  night: dict[str, Record]) -> None:
    await ingest(archive, [night["m51"]])
    config = archive.config(night_utc_offset=-7)
    result = invoke("stats", "--config", str(config), "--master", TEST_MASTER, "--by-night", "--json")
    assert [json.loads(line)["night"] for line in result.stdout.splitlines()] == ["2014-07-07"]


async def test_observations_before_1900_are_cataloged_as_they_are(archive: Archive) -> None:
    # Plates of the 19th century, and MJD-OBS = 0 placeholders: Spark 3 refused such timestamps by default.
    source = archive.tmp / "src"
    source.mkdir(parents=True)
    plate = source / "plate_1895.fits"
    fits.PrimaryHDU(header=fits.Header({"DATE-OBS": "1895-03-04T21:30:00", "OBJECT": "Orion"})).writeto(plate)
    placeholder = source / "zero.fits"
    fits.PrimaryHDU(header=fits.Header({"MJD-OBS": 0.0})).writeto(placeholder)
    await ingest(archive, [record_for(plate), record_for(placeholder)])
    times = {row["path"]: row["obs_time"] for row in listed(archive)}
    assert times == {str(plate): "1895-03-04T21:30:00+00:00", str(placeholder): "1858-11-17T00:00:00+00:00"}
    assert [row["path"] for row in listed(archive, "--until", "1900-01-01", "--object", "orion")] == [str(plate)]
