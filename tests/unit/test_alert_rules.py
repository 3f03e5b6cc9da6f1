"""The shipped Prometheus rules (config/prometheus/dataq-rules.yml): valid for Prometheus, tested with promtool
against the series a scrape of dataq gives, and each alert fired by a test, actionable, and built on metrics
dataq exports."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataq.ops.exported import EXPORTED_METRICS
from tests.promql_support import unknown_metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "prometheus" / "dataq-rules.yml"
RULE_TESTS = ROOT / "config" / "prometheus" / "dataq-rules.test.yml"
SEVERITIES = {"page", "ticket"}
MADE_BY_PROMETHEUS = {"up"}
"""Series Prometheus makes itself for every target, which rules may use beside dataq's."""


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("promtool")
    if executable is None:
        pytest.fail("promtool is not installed: `make install-test` installs it (Debian's prometheus package)",
                    pytrace=False)
    return subprocess.run([executable, *args], capture_output=True, text=True, timeout=60, check=False)


def load(path: Path) -> Any:
    with path.open(encoding="utf-8") as file:
        return yaml.safe_load(file)


def rules() -> list[dict[str, Any]]:
    return [rule for group in load(RULES)["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def rule_tests() -> list[dict[str, Any]]:
    return [case for test in load(RULE_TESTS)["tests"] for case in test.get("alert_rule_test", [])]


def test_promtool_finds_the_rules_valid() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, f"promtool check rules {RULES}:\n{result.stdout}{result.stderr}"


def test_every_rule_test_passes_under_promtool() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, f"promtool test rules {RULE_TESTS}:\n{result.stdout}{result.stderr}"


def test_the_rule_tests_load_the_shipped_rules() -> None:
    assert load(RULE_TESTS)["rule_files"] == [RULES.name]


def test_every_alert_has_a_test_that_fires_it_and_one_where_it_stays_quiet() -> None:
    fired = {case["alertname"] for case in rule_tests() if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in rule_tests() if not case.get("exp_alerts")}
    assert set(alerts()) - fired == set(), "alerts no rule test fires"
    assert set(alerts()) - quiet == set(), "alerts no rule test expects quiet"
    assert (fired | quiet) - set(alerts()) == set(), "rule tests of alerts the rules do not have"


def test_every_fired_alert_is_expected_with_its_annotations_in_full() -> None:
    for case in rule_tests():
        for expected in case.get("exp_alerts") or []:
            assert set(expected.get("exp_annotations", {})) == {"summary", "description"}, case["alertname"]
            assert expected["exp_labels"]["severity"] == alerts()[case["alertname"]]["labels"]["severity"]


def test_every_alert_says_how_bad_what_is_wrong_and_what_to_run_first() -> None:
    assert len(alerts()) >= 11
    for name, rule in alerts().items():
        assert name.startswith("Dataq"), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert annotations["summary"].strip(), f"{name} has no summary"
        assert annotations["description"].strip(), f"{name} has no description"
        assert "Likely causes" in annotations["description"], name
        assert "First run `" in annotations["description"], name


def test_the_rules_read_only_metrics_dataq_exports() -> None:
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    allowed = EXPORTED_METRICS | MADE_BY_PROMETHEUS | recorded
    for rule in rules():
        name = rule.get("alert") or rule["record"]
        assert unknown_metrics(rule["expr"], allowed) == set(), f"{name} reads metrics no dataq endpoint exports"
