"""Manifests of stored copies: ``disk_store`` names every copy under its root before the record is done, in lines
that GNU ``md5sum -c`` and ``sha256sum -c`` check without dataq, and a crash between a copy and its line leaves
nothing that a run again does not put right."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dataq.actions import storing
from dataq.actions.layout import UnsafePath
from dataq.audit import manifest
from dataq.audit.copies import check_copies, dark_files
from dataq.audit.copy_index import CopyIndex
from dataq.audit.findings import FileClass
from dataq.record import Record
from tests.actions_support import make_file

DATA = b"science frame " * 300


def files(directory: Path, count: int, prefix: str = "frame") -> list[Record]:
    return [make_file(directory, f"{prefix}-{n}.fits", DATA + bytes([n])) for n in range(count)]


def check_with(tool: str, root: Path) -> subprocess.CompletedProcess[str]:
    """``TOOL -c`` of every manifest under ``root``, run from the root, as an operator would."""
    names = sorted(str(path.relative_to(root)) for path in (root / manifest.MANIFEST_DIR).iterdir())
    return subprocess.run([tool, "--strict", "-c", *names], cwd=root, capture_output=True, text=True,
                          errors="surrogateescape", check=False)


def test_every_copy_stored_is_named_in_the_day_manifest_that_md5sum_checks(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    records = files(tmp_path / "mountain", 5)
    outcomes = storing.store_batch_sync([(r, f"night/{Path(r.path).name}") for r in records], str(root))
    assert all(isinstance(outcome, storing.Stored) for outcome in outcomes)
    checked = check_with("md5sum", root)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count(": OK") == 5
    named = manifest.entries(str(root))
    assert sorted(named) == sorted(f"night/{Path(r.path).name}" for r in records)
    entry = named[f"night/{Path(records[0].path).name}"]
    assert (entry.checksum, entry.size, entry.algorithm) == (records[0].checksum, records[0].size, "md5")
    assert entry.stored_at is not None and entry.manifest.startswith(".dataq/manifests/manifest-md5-")


def test_names_with_spaces_and_backslashes_are_written_as_coreutils_reads_them(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    records = [make_file(tmp_path / "mountain", name, DATA + name.encode())
               for name in ("a b.fits", "back\\slash.fits", "  leading.fits")]
    storing.store_batch_sync([(r, Path(r.path).name) for r in records], str(root))
    checked = check_with("md5sum", root)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert sorted(manifest.entries(str(root))) == sorted(Path(r.path).name for r in records)


def test_a_sha256_queue_keeps_a_sha256_manifest(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    source = tmp_path / "mountain" / "a.fits"
    source.parent.mkdir()
    source.write_bytes(DATA)
    record = Record(str(source), hashlib.sha256(DATA).hexdigest(), len(DATA))
    storing.store_batch_sync([(record, "a.fits")], str(root), algorithm="sha256")
    assert next((root / manifest.MANIFEST_DIR).iterdir()).name.startswith("manifest-sha256-")
    assert check_with("sha256sum", root).returncode == 0


def test_a_copy_found_stored_is_named_again_and_read_once(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    (record,) = files(tmp_path / "mountain", 1)
    for _ in range(2):
        (outcome,) = storing.store_batch_sync([(record, "a.fits")], str(root))
        assert isinstance(outcome, storing.Stored)
    text = next((root / manifest.MANIFEST_DIR).iterdir()).read_text()
    assert text.count(record.checksum) == 2, "a retry names the copy again: it may be the line a crash lost"
    assert list(manifest.entries(str(root))) == ["a.fits"]


def test_a_layout_into_dataqs_own_folder_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    (record,) = files(tmp_path / "mountain", 1)
    (outcome,) = storing.store_batch_sync([(record, ".dataq/manifests/x.txt")], str(root))
    assert isinstance(outcome, UnsafePath) and "dataq keeps for itself" in str(outcome)
    assert not (root / manifest.MANIFEST_DIR).exists()


def test_without_manifest_nothing_is_written_beside_the_copies(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    (record,) = files(tmp_path / "mountain", 1)
    storing.store_batch_sync([(record, "a.fits")], str(root), keep_manifest=False)
    assert [path.name for path in root.iterdir()] == ["a.fits"]


def test_a_line_cut_short_by_a_full_disk_or_a_crash_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    records = files(tmp_path / "mountain", 2)
    storing.store_batch_sync([(r, Path(r.path).name) for r in records], str(root))
    path = next((root / manifest.MANIFEST_DIR).iterdir())
    with path.open("a") as file:
        file.write("#dataq size=12 stored=2026-11-28T00:00:00.000Z\n0123456789abcdef0123")
    assert sorted(manifest.entries(str(root))) == sorted(Path(r.path).name for r in records)


CRASH_BEFORE_THE_MANIFEST = """
import os, signal, sys
from dataq.actions import storing
from dataq.record import Record

def crash(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

storing.manifest.append = crash
root, *fields = sys.argv[1:]
records = [Record(path=fields[i], checksum=fields[i + 1], size=int(fields[i + 2])) for i in range(0, len(fields), 3)]
storing.store_batch_sync([(record, os.path.basename(record.path)) for record in records], root)
"""


def test_a_kill_between_the_copies_and_their_manifest_lines_is_put_right_by_the_run_again(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    records = files(tmp_path / "mountain", 3)
    argv = [str(field) for record in records for field in (record.path, record.checksum, record.size)]
    crashed = subprocess.run([sys.executable, "-c", CRASH_BEFORE_THE_MANIFEST, str(root), *argv], check=False)
    assert crashed.returncode == -signal.SIGKILL
    # Published, and named by no manifest: what the crash leaves (the records were not done).
    assert sorted(os.listdir(root)) == sorted(Path(r.path).name for r in records)
    assert manifest.entries(str(root)) == {}
    assert len(list(dark_files(str(root), {}, "archive"))) == 3

    # The pop daemon runs the records again after its restart: each copy is found stored, and named now.
    outcomes = storing.store_batch_sync([(r, Path(r.path).name) for r in records], str(root))
    assert all(isinstance(outcome, storing.Stored) and not outcome.copied for outcome in outcomes)
    named = manifest.entries(str(root))
    assert list(dark_files(str(root), named, "archive")) == []
    checked = check_copies(str(root), named, "archive", deep=True)
    assert {finding.file_class for finding in checked} == {FileClass.ARRIVED}


@pytest.mark.parametrize("name", ["manifest-md5-2026112.txt", "notes.txt", "manifest-md5-20261128.txt~"])
def test_files_in_the_manifest_folder_that_are_not_manifests_are_not_read(tmp_path: Path, name: str) -> None:
    folder = tmp_path / manifest.MANIFEST_DIR
    folder.mkdir(parents=True)
    (folder / name).write_text("d41d8cd98f00b204e9800998ecf8427e  empty\n")
    assert manifest.entries(str(tmp_path)) == {}


def test_a_copy_whose_name_is_not_utf8_is_indexed_and_found(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    name = os.fsdecode(b"frame-\xe9t\xe9.fits")  # a Latin-1 name, as an old instrument writes it
    (record,) = files(tmp_path / "mountain", 1)
    storing.store_batch_sync([(record, name)], str(root))
    assert check_with("md5sum", root).returncode == 0
    with CopyIndex(str(root), str(tmp_path / "data")) as index:
        index.refresh()
        (named,) = index.lookup([record.checksum])[record.checksum]
    assert named.path == name and os.path.exists(root / name)
