"""``make test`` runs the suite on several pytest-xdist workers: the tests of one group (``XDIST_GROUPS`` in
tests/conftest.py) must all run on one of them, or the Spark tests start a JVM per worker and the systemd tests
boot a container per worker. pytest-xdist's own way of grouping (renaming node ids) stopped working with pytest
9 without a word: this runs a group across two workers and looks (with --dist load, the same probes land on
both)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBES = 4
PROBE_FILE_ENV = "DATAQ_TEST_PROBE_FILE"


@pytest.mark.parametrize("n", range(PROBES))
def test_probe_notes_its_worker(n: int) -> None:
    """A member of the group ``parallel-groups-probe``: in the run below, it notes which worker ran it."""
    if (out := os.environ.get(PROBE_FILE_ENV)) is not None:
        with open(out, "a") as notes:
            notes.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\n")


def workers_of_the_probes(tmp_path: Path, dist: str) -> list[str]:
    notes = tmp_path / f"workers-{dist}.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", dist,
         f"{Path(__file__).relative_to(ROOT)}::test_probe_notes_its_worker"],
        cwd=ROOT, env={**os.environ, PROBE_FILE_ENV: str(notes), "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return notes.read_text().split()


def test_the_tests_of_a_group_run_on_one_worker(tmp_path: Path) -> None:
    if os.environ.get(PROBE_FILE_ENV):
        pytest.skip("inside the probes' own run")
    grouped = workers_of_the_probes(tmp_path, "loadgroup")
    assert len(grouped) == PROBES and len(set(grouped)) == 1, grouped
