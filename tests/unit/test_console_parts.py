"""Parts of the console that need no Redis: what a feeder's exposition says, the repair's command line, and times
no calendar holds."""

from __future__ import annotations

from pathlib import Path

from dataq.config import load_settings
from dataq.ops.documents import when
from dataq.web.feeders import directories_of
from dataq.web.repairs import repair_argv

PARTIAL = """# HELP dataq_feed_records_sent_total Records a push daemon acknowledged.
# TYPE dataq_feed_records_sent_total counter
dataq_feed_records_sent_total{directory="/data/in"} 12.0
"""


def test_a_feeder_that_reports_only_part_of_its_metrics_is_shown_with_what_it_reports() -> None:
    (row,) = directories_of(PARTIAL, 1_800_000_000.0)
    assert row["directory"] == "/data/in" and row["sent"] == 12.0
    assert (row["pending"], row["connected"], row["last_acknowledged_age_seconds"]) == (None, None, None)


def test_a_repair_takes_a_directory_that_begins_with_a_dash_as_a_directory(tmp_path: Path) -> None:
    config = tmp_path / "dataq.toml"
    config.write_text("[queues.night]\n")
    argv = repair_argv(load_settings(config, environ={}), "night", "dir:--force")
    assert argv[-3:] == ["--repair", "--", "--force"]


def test_a_time_no_calendar_holds_is_shown_as_unknown() -> None:
    assert when(1e20) == "-" and when(float("nan")) == "-" and when(None) == "-"
