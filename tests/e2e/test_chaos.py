"""Requirement 2.1.1 of the 2014 design, proven on the real processes: "System shall not loose track of any data
pushed into it, even in the case of hardware or software faults that terminate the process"."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.chaos import ChaosPlan, ChaosRun


@pytest.mark.timeout(300)
async def test_no_acknowledged_record_is_lost_while_every_process_is_killed_at_random(tmp_path: Path) -> None:
    report = await ChaosRun(tmp_path, ChaosPlan(records=3000, kills_per_kind=2)).run()
    print(report.table())
    assert report.kills == {"push": 2, "pop": 2, "redis": 2}
    assert report.acknowledged > 0.85 * report.valid_ids
    assert report.lost == []
    assert report.unexplained_re_executions == []
    assert report.errors_for_valid_lines == 0
    assert report.ignored_never_sent == 0
    assert report.malformed_accepted == 0
    assert report.inconsistencies == []
    assert report.executed + report.inactive >= report.acknowledged
