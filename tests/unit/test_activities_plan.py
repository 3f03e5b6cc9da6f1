"""A queue's activities as its settings define them: which activity a record is in, the order claims look at
them, and the settings an operator may get wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataq.activities import plan_for
from dataq.config import load_settings
from dataq.errors import ConfigError, InvalidRecord
from dataq.record import Record, parse_line

SETTINGS = """
[queues.transfer.activities.express]
match = ["*/calib/*", "*_qa.fits"]
strict = true
[queues.transfer.activities.science]
match = ["*.fits"]
share = 3
[queues.transfer.activities.backfill]
share = 1
"""


def settings(tmp_path: Path, text: str = SETTINGS) -> object:
    path = tmp_path / "dataq.toml"
    path.write_text(text)
    return load_settings(path, environ={"HOME": str(tmp_path)})


def test_the_first_activity_whose_globs_fit_the_path_in_settings_order_else_default(tmp_path: Path) -> None:
    plan = plan_for(settings(tmp_path).queue("transfer"))  # type: ignore[attr-defined]
    assert plan.assign("/data/2026/calib/flat.fits") == "express"  # express comes first, though science fits too
    assert plan.assign("/data/obj_qa.fits") == "express"
    assert plan.assign("/data/obj.fits") == "science"
    assert plan.assign("/data/obj.hdr") == "default"
    resolved = plan.resolve([(Record("/data/obj.fits", "a" * 32, 1, activity="backfill"), "s"),
                             (Record("/data/obj.fits", "b" * 32, 1), "s"),
                             (Record("/data/obj.hdr", "c" * 32, 1, activity="gone"), "s")])
    assert [record.activity for record, _ in resolved] == ["backfill", "science", None]


def test_strict_activities_are_looked_at_first_then_the_shares_default_among_them(tmp_path: Path) -> None:
    plan = plan_for(settings(tmp_path).queue("transfer"))  # type: ignore[attr-defined]
    assert [(a.name, a.weight) for a in plan.served] == [("express", 0), ("default", 1), ("science", 3),
                                                         ("backfill", 1)]
    assert plan.named == ("express", "science", "backfill")
    assert plan.codes(["default", "science", None]) == "020"
    assert plan.codes([None, "default"]) == ""  # every record default's: nothing to split


def test_a_feeder_may_name_only_a_defined_activity_and_a_site_handing_on_falls_back_to_the_globs(
        tmp_path: Path) -> None:
    rules = settings(tmp_path).queue("transfer").rules  # type: ignore[attr-defined]
    line = '{"path": "/d/a.fits", "checksum": "%s", "size": 1, "activity": "%s"%s}'
    assert parse_line(line % ("a" * 32, "backfill", ""), rules).activity == "backfill"
    with pytest.raises(InvalidRecord, match="unknown activity 'urgent'; this queue's activities are: backfill, "
                                            "default, express, science"):
        parse_line(line % ("a" * 32, "urgent", ""), rules)
    handed = parse_line(line % ("a" * 32, "urgent", ', "site": "mountain"'), rules)
    assert handed.activity is None and handed.source == "mountain"
    with pytest.raises(InvalidRecord, match="is not an activity name"):
        parse_line(line % ("a" * 32, "no spaces", ""), rules)


@pytest.mark.parametrize(("table", "words"), [
    ("share = 0", "key 'queues.transfer.activities.x.share' must be at least 1, got 0"),
    ("strict = true\nshare = 2", "key 'queues.transfer.activities.x.share': a strict activity is served before"),
    ('match = ["calib/*"]', "glob 'calib/*' can never match: a record's path is absolute"),
    ('match = "*.fits"', "key 'queues.transfer.activities.x.match' must be a list of strings"),
    ("sahre = 2", "unknown key 'queues.transfer.activities.x.sahre'; did you mean 'share'?"),
])
def test_activities_given_wrong_are_settings_errors_naming_the_key(tmp_path: Path, table: str, words: str) -> None:
    with pytest.raises(ConfigError) as refused:
        settings(tmp_path, f"[queues.transfer.activities.x]\n{table}\n")
    assert words in str(refused.value)


def test_default_takes_a_share_but_no_globs_and_a_name_must_suit_a_key(tmp_path: Path) -> None:
    plan = plan_for(settings(tmp_path, "[queues.transfer.activities.default]\nshare = 4\n")  # type: ignore[attr-defined]
                    .queue("transfer"))
    assert [(a.name, a.weight) for a in plan.served] == [("default", 4)]
    with pytest.raises(ConfigError, match="has no globs of its own"):
        settings(tmp_path, '[queues.transfer.activities.default]\nmatch = ["*"]\n')
    with pytest.raises(ConfigError, match="activity name 'a:b' is invalid"):
        settings(tmp_path, '[queues.transfer.activities."a:b"]\n')
    many = "".join(f"[queues.transfer.activities.a{n}]\n" for n in range(33))
    with pytest.raises(ConfigError, match="defines 33 activities; at most 32"):
        settings(tmp_path, many)
