"""What the archive learns from a FITS file's headers: plain, multi-extension, tile-compressed and gzipped files,
from astropy's own test data and from files astropy writes."""

from __future__ import annotations

import datetime as dt
import gzip
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
pytest.importorskip("astropy", reason="astropy is not installed (pip install 'dataq[spark]')")

import numpy as np
from astropy.io import fits

from dataq.actions.archive.catalog import FITS_KEYWORDS
from dataq.actions.archive.headers import read_header
from dataq.actions.archive.job import CHUNK_BYTES, ingest_file
from tests.archive_support import astropy_sample, record_for

COLUMNS = [column for _, column, _ in FITS_KEYWORDS]


def facts(path: Path) -> dict[str, Any]:
    """The header facts of a file, read as an executor reads them (the first chunk, the file when larger)."""
    with open(path, "rb") as source:
        head = source.read(CHUNK_BYTES)
    is_fits, error, extensions, obs_time, values = read_header(str(path), head, path.stat().st_size)
    return {"is_fits": is_fits, "fits_error": error, "extensions": extensions, "obs_time": obs_time,
            **dict(zip(COLUMNS, values, strict=True))}


def image(seed: int = 0, shape: tuple[int, int] = (64, 64)) -> Any:
    return np.random.default_rng(seed).integers(0, 4000, size=shape).astype(np.int16)


def test_a_wfpc2_file_with_the_old_date_form_and_four_extensions(tmp_path: Path) -> None:
    found = facts(astropy_sample("test0.fits", tmp_path))
    assert (found["is_fits"], found["fits_error"], found["extensions"]) == (True, None, 4)
    assert (found["date_obs"], found["time_obs"], found["instrument"], found["exptime"]) == \
        ("19/05/94", "15:41:16", "WFPC2", 0.23)
    assert found["obs_time"] == dt.datetime(1994, 5, 19, 15, 41, 16, tzinfo=dt.UTC)
    assert found["mjd_obs"] == pytest.approx(49491.65366, abs=1e-5)


def test_a_stis_file_takes_the_date_its_primary_header_lacks_from_the_first_image_extension(tmp_path: Path) -> None:
    found = facts(astropy_sample("o4sp040b0_raw.fits", tmp_path))
    assert found["extensions"] == 6
    assert (found["instrument"], found["telescope"], found["object"]) == ("STIS", "HST", "HD101998")  # TARGNAME
    assert (found["date_obs"], found["time_obs"], found["exptime"]) == ("1998-04-20", "18:38:15", 30.0)
    assert found["obs_time"] == dt.datetime(1998, 4, 20, 18, 38, 15, tzinfo=dt.UTC)


def test_astropys_compressed_image_gives_the_keywords_of_its_image_header(tmp_path: Path) -> None:
    found = facts(astropy_sample("comp.fits", tmp_path))
    assert (found["is_fits"], found["extensions"], found["object"], found["telescope"]) == \
        (True, 1, "NGC 1316", "Optical")


@pytest.mark.parametrize("compression", ["RICE_1", "GZIP_1"])
def test_an_fpacked_file_larger_than_one_read_is_read_from_its_compressed_extension(
        tmp_path: Path, compression: str) -> None:
    header = fits.Header({"DATE-OBS": "2014-07-08", "TIME-OBS": "03:12:45.5", "INSTRUME": "mosaic3",
                          "TELESCOP": "kp4m", "OBJECT": "M 51", "EXPTIME": 300.0})
    path = tmp_path / "k4m_140708_031245.fits.fz"
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(image(shape=(1024, 1024)), header=header,
                                                      compression_type=compression)]).writeto(path)
    assert path.stat().st_size > CHUNK_BYTES
    found = facts(path)
    assert (found["is_fits"], found["fits_error"], found["extensions"]) == (True, None, 1)
    assert (found["instrument"], found["telescope"], found["object"], found["exptime"]) == \
        ("mosaic3", "kp4m", "M 51", 300.0)
    assert found["obs_time"] == dt.datetime(2014, 7, 8, 3, 12, 45, 500_000, tzinfo=dt.UTC)


def test_a_multi_extension_file_prefers_its_primary_header_and_counts_tables_too(tmp_path: Path) -> None:
    primary = fits.PrimaryHDU(header=fits.Header({"INSTRUME": "decam", "MJD-OBS": 56847.25}))
    first = fits.ImageHDU(image(1), header=fits.Header({"INSTRUME": "ccd1", "OBJECT": "field 7",
                                                          "FILTER": "g"}))
    second = fits.ImageHDU(image(2), header=fits.Header({"TELESCOP": "never read: not the first image"}))
    table = fits.BinTableHDU.from_columns([fits.Column(name="flux", format="E", array=np.ones(3))])
    path = tmp_path / "c4d_140709_060000_ori.fits"
    fits.HDUList([primary, first, table, second]).writeto(path)
    found = facts(path)
    assert found["extensions"] == 3
    assert (found["instrument"], found["object"], found["filter"], found["telescope"]) == \
        ("decam", "field 7", "g", None)
    assert found["obs_time"] == dt.datetime(2014, 7, 9, 6, tzinfo=dt.UTC) and found["date_obs"] is None
    assert found["mjd_obs"] == 56847.25


def test_a_gzipped_fits_file_is_read_through_the_compression(tmp_path: Path) -> None:
    plain = tmp_path / "plain.fits"
    fits.PrimaryHDU(image(), header=fits.Header({"INSTRUME": "odi", "DATE-OBS": "2014-07-09T23:59:59"})).writeto(
        plain)
    packed = tmp_path / "odi.fits.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    found = facts(packed)
    assert (found["is_fits"], found["instrument"], found["extensions"]) == (True, "odi", 0)


def test_a_damaged_tail_ends_the_extension_count_but_keeps_the_headers(tmp_path: Path) -> None:
    path = tmp_path / "cut.fits"
    fits.HDUList([fits.PrimaryHDU(header=fits.Header({"INSTRUME": "mosaic3"})), fits.ImageHDU(image(1)),
                  fits.ImageHDU(image(2))]).writeto(path)
    data = path.read_bytes()
    path.write_bytes(data[:-5000] + b"garbage" * 10)
    found = facts(path)
    assert found["is_fits"] and found["instrument"] == "mosaic3"
    assert found["extensions"] in (1, 2)  # the damaged second extension may or may not be counted; never a crash


def test_an_unreadable_date_is_kept_as_text_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "odd.fits"
    fits.PrimaryHDU(header=fits.Header({"DATE-OBS": "last night", "INSTRUME": "x"})).writeto(path)
    found = facts(path)
    assert (found["is_fits"], found["date_obs"], found["obs_time"]) == (True, "last night", None)
    assert found["fits_error"] == "DATE-OBS: 'last night' is neither YYYY-MM-DD[Thh:mm:ss] nor DD/MM/YY"


def test_an_executor_returns_the_extensions_and_observation_time_with_the_copy(tmp_path: Path) -> None:
    record = record_for(astropy_sample("test0.fits", tmp_path))
    meta = ingest_file(record.path, record.checksum, record.size, str(tmp_path / "archive"))
    assert meta[3:7] == (True, None, 4, dt.datetime(1994, 5, 19, 15, 41, 16, tzinfo=dt.UTC))


def test_values_that_are_not_finite_numbers_are_named_and_left_empty(tmp_path: Path) -> None:
    path = tmp_path / "nan.fits"
    fits.PrimaryHDU(header=fits.Header({"MJD-OBS": "NaN", "EXPTIME": "inf", "INSTRUME": "x"})).writeto(path)
    found = facts(path)
    assert (found["is_fits"], found["mjd_obs"], found["exptime"], found["obs_time"]) == (True, None, None, None)
    assert "MJD-OBS: 'NaN' is not a finite number" in found["fits_error"]
    assert "EXPTIME: 'inf' is not a finite number" in found["fits_error"]


def test_a_blank_keyword_in_the_primary_header_does_not_hide_the_extensions_value(tmp_path: Path) -> None:
    path = tmp_path / "blank.fits"
    fits.HDUList([fits.PrimaryHDU(header=fits.Header({"DATE-OBS": "", "OBJECT": "  "})),
                  fits.ImageHDU(image(), header=fits.Header({"DATE-OBS": "2014-07-08T03:00:00", "OBJECT": "M 31"}))
                  ]).writeto(path)
    found = facts(path)
    assert (found["date_obs"], found["object"], found["fits_error"]) == ("2014-07-08T03:00:00", "M 31", None)
    assert found["obs_time"] == dt.datetime(2014, 7, 8, 3, tzinfo=dt.UTC)
