"""The shipped Grafana dashboard (config/grafana/dataq.json): a well-formed Grafana 10 dashboard whose every query
is valid PromQL naming only metrics dataq exports, so no panel stays empty because a name drifted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataq.ops.exported import EXPORTED_METRICS
from tests.promql_support import metric_names, unknown_metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "config" / "grafana" / "dataq.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRAFANA_VALUES = {"$__rate_interval": "5m", "$queue": ".*", "$directory": ".*", "$job": ".*"}
"""What Grafana puts in place of its variables, for promtool (a regex for the multi-value ones)."""


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))  # a collapsed row holds its panels


def graphs() -> list[dict[str, Any]]:
    return [panel for panel in all_panels(dashboard()["panels"]) if panel["type"] != "row"]


def queries() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in graphs() for target in panel["targets"]]


def test_the_tokenizer_finds_the_metric_names_of_a_query() -> None:
    assert metric_names(
        'histogram_quantile(0.99, sum by (queue, le) (rate(dataq_claim_latency_seconds_bucket{queue=~"$queue"}'
        '[$__rate_interval])))') == {"dataq_claim_latency_seconds_bucket"}
    assert metric_names(
        'max by (queue) (dataq_queue_length{list="active"}) > 3600 and on (queue) max by(queue)(dataq_flag{flag='
        '"action"}) == 1 unless ignoring (list) group_left (x) up offset 5m') == {
            "dataq_queue_length", "dataq_flag", "up"}
    assert metric_names('time() - dataq_feed_last_success_timestamp_seconds{directory=~"${directory}"} > 1e3 '
                        'or vector(0) * Inf') == {"dataq_feed_last_success_timestamp_seconds"}
    assert unknown_metrics("rate(dataq_records_done_total[5m]) + dataq_receipt_latency_seconds_count",
                           EXPORTED_METRICS) == set()
    assert unknown_metrics("dataq_records_done + dataq_records_done_total_count + nonsense_bucket",
                           EXPORTED_METRICS) == {"dataq_records_done", "dataq_records_done_total_count",
                                                 "nonsense_bucket"}


def test_every_query_names_only_metrics_dataq_exports() -> None:
    for title, expr in queries():
        assert metric_names(expr), f"panel {title!r}: no metric found in {expr!r}"
        assert unknown_metrics(expr, EXPORTED_METRICS) == set(), f"panel {title!r} reads what dataq does not export"


def test_the_template_variables_list_values_of_exported_metrics() -> None:
    variables = {variable["name"]: variable for variable in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["datasource"]["current"]["value"] == "${DS_PROMETHEUS}"
    assert variables["queue"]["definition"] == "label_values(dataq_queue_length, queue)"
    for variable in variables.values():
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["definition"])
            assert match and match[1] in EXPORTED_METRICS, variable["name"]
            assert variable["query"]["query"] == variable["definition"]


def test_every_panel_has_a_unique_id_a_datasource_and_a_query() -> None:
    ids = [panel["id"] for panel in all_panels(dashboard()["panels"])]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in graphs():
        assert panel["title"] and panel.get("description"), panel["id"]
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        assert all(target["datasource"] == DATASOURCE and target["expr"] for target in panel["targets"])


def test_it_is_a_grafana_10_dashboard_importable_with_any_prometheus() -> None:
    board = dashboard()
    assert 36 <= board["schemaVersion"] <= 39
    assert [entry["name"] for entry in board["__inputs"]] == ["DS_PROMETHEUS"]
    assert board["uid"] and board["title"] and board["id"] is None
    for panel in all_panels(board["panels"]):
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24, panel["title"]


def test_the_dashboard_covers_what_an_operator_watches() -> None:
    read = {name for _, expr in queries() for name in metric_names(expr)}
    for needed in ("dataq_records_done_total", "dataq_action_bytes_total", "dataq_queue_length",
                   "dataq_queue_oldest_age_seconds", "dataq_records_failed_total", "dataq_records_deactivated_total",
                   "dataq_destination_unreachable", "dataq_workers", "dataq_action_duration_seconds_bucket",
                   "dataq_claim_latency_seconds_bucket", "dataq_feed_spool_pending_records",
                   "dataq_feed_spool_oldest_pending_age_seconds", "dataq_feed_spool_refused_records",
                   "dataq_feed_link_up", "dataq_redis_up", "dataq_replication_replicas", "dataq_custody_records",
                   "dataq_receipt_latency_seconds_bucket", "process_resident_memory_bytes",
                   "process_cpu_seconds_total"):
        assert needed in read, f"no panel shows {needed}"


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query, Grafana's variables replaced by what Grafana would put there."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: `make install-test` installs it (Debian's prometheus package)",
                    pytrace=False)
    rules = []
    for index, (_, query) in enumerate(queries()):
        expr = query
        for variable, value in GRAFANA_VALUES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"a Grafana variable this test does not know: {query}"
        rules.append({"record": f"dashboard:query_{index}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, f"a dashboard query is not PromQL:\n{result.stdout}{result.stderr}"
