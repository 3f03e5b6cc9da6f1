"""The audit's brakes and its progress line, as pure functions."""

from __future__ import annotations

import io

import pytest

from dataq.audit.brakes import Refused, RepairLimit, check_repair, check_root
from dataq.audit.progress import Progress


@pytest.mark.parametrize(("text", "audited", "allowed"), [("10%", 1000, 100), ("10%", 50, 10), ("10%", 0, 10),
                                                          ("0.5%", 100_000, 500), ("25", 3, 25), ("100%", 7, 10)])
def test_a_limit_is_a_share_of_at_least_ten_files_or_a_number_of_files(text: str, audited: int,
                                                                        allowed: int) -> None:
    assert RepairLimit.parse(text).files(audited) == allowed


@pytest.mark.parametrize("text", ["", "ten", "10 %", "-5", "1.5", "101%"])
def test_a_limit_that_is_neither_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        RepairLimit.parse(text)


def test_a_repair_within_the_limit_passes_and_above_it_only_with_force() -> None:
    limit = RepairLimit.parse("10%")
    check_repair(10, 50, limit, force=False)
    with pytest.raises(Refused, match="would touch 11 of 50 files audited"):
        check_repair(11, 50, limit, force=False)
    check_repair(50, 50, limit, force=True)


@pytest.mark.parametrize(("exists", "named", "holds", "before", "message"), [
    (False, 0, False, None, "does not exist"),
    (True, 5, False, None, "holds no file, but its manifests name 5 copies"),
    (True, 0, False, 7, "has no manifest, but its last audit found 7 copies"),
])
def test_a_root_that_looks_unmounted_is_refused(exists: bool, named: int, holds: bool, before: int | None,
                                                message: str) -> None:
    with pytest.raises(Refused, match=message):
        check_root("/archive", exists, named, holds, before)


def test_a_root_as_expected_passes() -> None:
    check_root("/archive", True, 5, True, 5)
    check_root("/archive", True, 0, False, None)  # a new root: nothing stored yet


def test_progress_says_files_rate_and_time_left_and_is_silent_off_a_terminal() -> None:
    shown = io.StringIO()
    progress = Progress("copies under /archive", 4, enabled=True, stream=shown)
    progress.tick(1000)
    progress.tick(1000)
    line = progress.line()
    assert line.startswith("copies under /archive: 2/4 files, ") and "files/s" in line and line.endswith("s left")
    silent = io.StringIO()
    quiet = Progress("x", 1, enabled=False, stream=silent)
    quiet.tick(1)
    quiet.finish()
    assert silent.getvalue() == ""
