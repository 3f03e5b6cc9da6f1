"""What a Spark executor does with one file, called directly (no Spark): the cases a batch test would hide."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
pytest.importorskip("astropy", reason="astropy is not installed (pip install 'dataq[spark]')")

from dataq.actions.archive.catalog import FITS_KEYWORDS
from dataq.actions.archive.job import CHUNK_BYTES, IngestFailure, ingest_file
from tests.archive_support import archived_copy, leftovers, md5, write_fits, write_plain

COLUMNS = [column for _, column, _ in FITS_KEYWORDS]


def values(meta: tuple[object, ...]) -> dict[str, object]:
    return dict(zip(COLUMNS, meta[7:], strict=True))


def test_the_header_of_a_fits_file_larger_than_one_read_is_still_extracted(tmp_path: Path) -> None:
    record = write_fits(tmp_path / "big.fits", {"INSTRUME": "decam", "EXPTIME": 90}, shape=(1024, 1024))
    assert record.size > CHUNK_BYTES
    meta = ingest_file(record.path, record.checksum, record.size, str(tmp_path / "archive"))
    assert meta[3:5] == (True, None)
    assert (values(meta)["instrument"], values(meta)["exptime"]) == ("decam", 90.0)
    assert archived_copy(tmp_path / "archive", record.checksum).read_bytes() == Path(record.path).read_bytes()


def test_a_file_named_fits_that_is_not_fits_is_archived_with_a_fits_error(tmp_path: Path) -> None:
    record = write_plain(tmp_path / "notes.fits", b"these are notes, not an image\n")
    meta = ingest_file(record.path, record.checksum, record.size, str(tmp_path / "archive"))
    assert meta[3] is False
    assert str(meta[4]).startswith("unreadable FITS header")


def test_a_checksum_that_is_not_a_hex_digest_is_refused_before_it_names_a_path(tmp_path: Path) -> None:
    record = write_plain(tmp_path / "f.dat", b"data")
    sneaky = "../" + md5(b"data")[3:]  # a queue's checksum pattern may allow it; the store's layout must not
    with pytest.raises(IngestFailure, match="is not a lower-case hex md5 digest"):
        ingest_file(record.path, sneaky, record.size, str(tmp_path / "archive"))
    assert not (tmp_path / "archive").exists()


def test_other_hash_algorithms_name_the_copy_by_their_digest(tmp_path: Path) -> None:
    import hashlib

    record = write_plain(tmp_path / "f.dat", b"sha data")
    digest = hashlib.sha256(b"sha data").hexdigest()
    meta = ingest_file(record.path, digest, record.size, str(tmp_path / "archive"), algorithm="sha256")
    assert meta[2] == f"{digest[:2]}/{digest[2:4]}/{digest}"
    with pytest.raises(IngestFailure, match="checksum mismatch"):
        ingest_file(record.path, hashlib.sha256(b"other").hexdigest(), record.size, str(tmp_path / "archive2"),
                    algorithm="sha256")
    assert leftovers(tmp_path / "archive2") == []
