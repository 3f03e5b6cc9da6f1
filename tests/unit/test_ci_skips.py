"""CI cannot go green by skipping: with ``CI`` set, any skip fails the run, except one for another operating system."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(tmp_path: Path, body: str, *, ci: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(f"import pytest\n\n{body}\n")
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pytest.ini"), "-p", "tests.conftest", "-q", "-p",
         "no:cacheprovider", str(tmp_path)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )


SKIPPED = 'def test_needs_java():\n    pytest.skip("no Java 17+ here")\n'


def test_a_skip_fails_the_run_in_ci_and_says_so(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, SKIPPED, ci=True)
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout
    assert "no Java 17+ here" in result.stdout  # -rs names it
    assert "a skip in CI is a failure" in result.stdout


def test_outside_ci_a_skip_is_reported_but_does_not_fail(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, SKIPPED, ci=False)
    assert result.returncode == pytest.ExitCode.OK, result.stdout
    assert "no Java 17+ here" in result.stdout


def test_a_skip_for_another_operating_system_is_the_one_ci_accepts(tmp_path: Path) -> None:
    # As skip_on_other_os skips on a machine that is not Linux (this one is):
    body = 'from tests.conftest import OTHER_OS\n\n@pytest.mark.skipif(True, reason=OTHER_OS + "needs Linux /proc")\n' \
           "def test_linux_only():\n    pass\n"
    result = run_pytest(tmp_path, body, ci=True)
    assert result.returncode == pytest.ExitCode.OK, result.stdout
