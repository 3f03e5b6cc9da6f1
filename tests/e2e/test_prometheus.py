"""dataq as Prometheus sees it: a real ``prometheus`` server on loopback, loaded with the shipped alert rules,
scrapes a real ``dataq run`` (push and pop daemons, web console, a watching feeder) whose destination is down,
and raises the alert an operator would be paged with; ``promtool check metrics`` finds nothing to say about any
daemon's exposition, and what the daemons export is exactly what :data:`EXPORTED_METRICS` lists."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataq.embedded.redis_server import free_port
from dataq.ops.activity_metrics import ACTIVITY_ACTIVE, ACTIVITY_DONE, ACTIVITY_ETA
from dataq.ops.exported import EXPORTED_METRICS
from dataq.ops.metrics import ETA, REPLICAS, REPLICATION_PROBLEMS
from testbed.ports import unclaimed_port
from testbed.waits import eventually, eventually_equal
from tests.e2e.test_suite import DATAQ
from tests.pop_support import daemon_env

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "prometheus" / "dataq-rules.yml"
LOOPBACK = "127.0.0.1"
QUEUE = "transfer"
UNREACHABLE_ALERT = "DataqDestinationUnreachable"
FILES = 3
SITUATIONAL = {
    # Exported only where the queue's Redis is replicated (Sentinel, [redis] min_replicas, Cluster): a plain
    # redis-server, as here, has no replicas to count and no replication to go wrong.
    REPLICAS: "only with Sentinel, min_replicas or Cluster",
    REPLICATION_PROBLEMS: "only with Sentinel, min_replicas or Cluster",
    # Left out while the time cannot be said: here a destination is unreachable on purpose.
    ETA: "only while the backlog's time can be said",
    # The suite's queue defines no activities.
    ACTIVITY_ACTIVE: "only for a queue with activities",
    ACTIVITY_DONE: "only for a queue with activities",
    ACTIVITY_ETA: "only for a queue with activities",
}
"""Families of :data:`EXPORTED_METRICS` that a single-Redis ``dataq run`` rightly does not export, and why."""


def executable(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `make install-test` installs it (Debian's prometheus package)",
                    pytrace=False)
    return path


def suite_config(tmp_path: Path, redis_url: str, ports: dict[str, int], incoming: Path) -> Path:
    """``dataq run`` with every endpoint on a port of its own and ``network_move`` to an rsync daemon that nobody
    runs: declared unreachable after one refused connection, and probed often."""
    destination = f"rsync://{LOOPBACK}:{ports['rsyncd']}/incoming"
    lines = [
        f'data_dir = "{tmp_path / "data"}"',
        "[redis]", f'url = "{redis_url}"',
        "[log]", f'dir = "{tmp_path / "log"}"', 'level = "warning"',
        "[push]", f"port = {ports['push']}",
        "[pop]", "heartbeat_interval = 0.2", "heartbeat_ttl = 2.0", "sweep_interval = 0.2", "grace_period = 2.0",
        "unreachable_after = 1", "probe_delay = 0.5", "probe_max_delay = 2.0",
        "[metrics]", f"push_port = {ports['push_metrics']}", f"pop_port = {ports['pop_metrics']}",
        "[web]", f"port = {ports['web']}",
        "[feed]", f'directories = ["{incoming}"]', f"metrics_port = {ports['feed_metrics']}", "settle = 0.2",
        f"[queues.{QUEUE}]", 'actions = ["network_move"]',
        f"[queues.{QUEUE}.network_move]", f'destination = "{destination}"', "io_timeout = 5",
    ]
    path = tmp_path / "dataq.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def shipped_rule_names() -> list[str]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule.get("alert") or rule["record"] for group in rules["groups"] for rule in group["rules"]]


def shipped_rule(alert: str) -> dict[str, Any]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    (rule,) = [rule for group in rules["groups"] for rule in group["rules"] if rule.get("alert") == alert]
    return dict(rule)


def rules_without_delays(target: Path) -> Path:
    """The shipped rules with every ``for:`` cut to 0s. The test's one liberty with the file: its alerts wait
    minutes to hours before firing, which no test can sit through; expressions, labels and annotations are
    the shipped ones."""
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    target.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    return target


def prometheus_config(tmp_path: Path, rules: Path, dataq: list[str], feeders: list[str]) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "dataq", "static_configs": [{"targets": dataq}]},
            {"job_name": "dataq-feed", "static_configs": [{"targets": feeders}]},
        ],
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


class PrometheusAPI:
    """The HTTP API of the test's own prometheus server."""

    def __init__(self, port: int) -> None:
        self.base = f"http://{LOOPBACK}:{port}/api/v1/"

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        reply = json.loads(fetch(self.base + path + query))
        assert reply["status"] == "success", reply
        return reply["data"]

    def ready(self) -> bool:
        try:
            fetch(self.base.removesuffix("api/v1/") + "-/ready")
        except (urllib.error.URLError, ConnectionError):
            return False
        return True

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """The alerts of rule ``name``, pending or firing."""
        return [alert for alert in self.get("alerts")["alerts"] if alert["labels"]["alertname"] == name]

    def series(self, query: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("query", query=query)["result"]
        return result


def families(exposition: str) -> set[str]:
    """The families an exposition declares (``# TYPE`` lines name counters with ``_total``, histograms by family,
    as :data:`EXPORTED_METRICS` does), whether or not they hold a sample yet."""
    return {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")}


@pytest.mark.timeout(120)
async def test_prometheus_scrapes_every_daemon_and_fires_the_shipped_alert_for_a_destination_that_is_down(
    tmp_path: Path, redis_url: str, children: list[subprocess.Popen[bytes]]
) -> None:
    prometheus, promtool = executable("prometheus"), executable("promtool")
    ports = {name: free_port() for name in
             ("push", "push_metrics", "pop_metrics", "web", "feed_metrics", "prometheus")}
    # The destination nobody listens on: a port the kernel does not give another test's daemon meanwhile.
    ports["rsyncd"] = unclaimed_port()
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    config = suite_config(tmp_path, redis_url, ports, incoming)
    destination = f"rsync://{LOOPBACK}:{ports['rsyncd']}/incoming"
    endpoints = {role: f"{LOOPBACK}:{ports[role]}" for role in ("push_metrics", "pop_metrics", "web", "feed_metrics")}

    with (tmp_path / "dataq-run.log").open("wb") as log:
        suite = subprocess.Popen([*DATAQ, "run", "--config", str(config)], cwd=tmp_path, stderr=log,
                                 env={**daemon_env(), "HOME": str(tmp_path)})
    children.append(suite)
    scrape = prometheus_config(tmp_path, rules_without_delays(tmp_path / "dataq-rules.yml"),
                               [endpoints[role] for role in ("push_metrics", "pop_metrics", "web")],
                               [endpoints["feed_metrics"]])
    with (tmp_path / "prometheus.log").open("wb") as log:
        # Its own port and its own storage directory, in this test's tmp_path; killed at teardown (children).
        children.append(subprocess.Popen(
            [prometheus, f"--web.listen-address={LOOPBACK}:{ports['prometheus']}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--config.file={scrape}"],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT))
    api = PrometheusAPI(ports["prometheus"])
    try:
        for n in range(FILES):
            (incoming / f"frame{n}.fits").write_bytes(f"frame {n} of the instrument".encode())

        async def serving() -> bool:
            try:
                for endpoint in endpoints.values():
                    fetch(f"http://{endpoint}/metrics")
            except (urllib.error.URLError, ConnectionError):
                return False
            return api.ready()

        await eventually(serving, what="every dataq endpoint and prometheus to serve")

        async def health() -> list[tuple[str, str, str]]:
            targets = api.get("targets", state="active")["activeTargets"]
            return sorted((t["labels"]["job"], t["labels"]["instance"], t["health"]) for t in targets)

        await eventually_equal(health, sorted([
            ("dataq", endpoints["push_metrics"], "up"), ("dataq", endpoints["pop_metrics"], "up"),
            ("dataq", endpoints["web"], "up"), ("dataq-feed", endpoints["feed_metrics"], "up")]),
            what="prometheus to scrape every dataq endpoint")

        async def unreachable_alerts() -> list[str]:
            return [alert["state"] for alert in api.alerts(UNREACHABLE_ALERT)]

        await eventually_equal(unreachable_alerts, ["firing"], what=f"prometheus to fire {UNREACHABLE_ALERT}")
        (alert,) = api.alerts(UNREACHABLE_ALERT)
        assert alert["labels"] == {"alertname": UNREACHABLE_ALERT, "queue": QUEUE, "destination": destination,
                                   **shipped_rule(UNREACHABLE_ALERT)["labels"]}
        assert alert["annotations"]["summary"].strip() and alert["annotations"]["description"].strip()
        assert destination in alert["annotations"]["summary"]

        async def rule_health() -> dict[str, str]:
            return {rule["name"]: rule["health"] for group in api.get("rules")["groups"] for rule in group["rules"]}

        # Every shipped rule loaded and evaluated without an error against what dataq really exports.
        await eventually_equal(rule_health, dict.fromkeys(shipped_rule_names(), "ok"),
                               what="every shipped rule evaluated")

        feeder = f'{{job="dataq-feed",directory="{incoming}"}}'
        assert api.series(f"dataq_feed_records_sent_total{feeder}"), "the feeder's records sent, in prometheus"
        assert api.series(f"dataq_feed_spool_pending_records{feeder}"), "the feeder's spool, in prometheus"
        for role in ("web", "feed_metrics"):
            (memory,) = api.series(f'process_resident_memory_bytes{{instance="{endpoints[role]}"}}')
            assert float(memory["value"][1]) > 0, f"{role}: {memory}"

        exported: set[str] = set()
        for role, endpoint in endpoints.items():
            body = fetch(f"http://{endpoint}/metrics")
            lint = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True,
                                  timeout=30, check=False)
            assert (lint.returncode, lint.stdout + lint.stderr) == (0, ""), f"promtool on {role}'s exposition"
            assert families(body) <= EXPORTED_METRICS, f"{role} exports families EXPORTED_METRICS does not list"
            exported |= families(body)
        assert EXPORTED_METRICS - exported == set(SITUATIONAL), "listed in EXPORTED_METRICS, exported by none"
    finally:
        suite.send_signal(signal.SIGTERM)
        suite.wait(timeout=60)
