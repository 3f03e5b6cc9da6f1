"""What a daemon's metrics say, rendered by prometheus-client exactly as a scrape gets them."""

from __future__ import annotations

import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dataq.ops.exported import EXPORTED_METRICS
from dataq.ops.health import Rates
from dataq.ops.metrics import DaemonMetrics
from dataq.store.types import Summary


def samples(metrics: DaemonMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_counters_are_the_daemons_own_totals_read_at_each_scrape() -> None:
    totals = {"pushed": 3, "duplicate": 1, "input_error": 0}
    metrics = DaemonMetrics("transfer", "push", lambda: totals)
    assert samples(metrics)["dataq_records_pushed_total", frozenset({("queue", "transfer")})] == 3
    totals["pushed"] = 7
    assert samples(metrics)["dataq_records_pushed_total", frozenset({("queue", "transfer")})] == 7


def test_a_daemon_exports_its_own_counters_only_and_starts_them_at_zero() -> None:
    push = {name for name, _ in samples(DaemonMetrics("transfer", "push", dict))}
    pop = samples(DaemonMetrics("transfer", "pop", dict))
    assert "dataq_records_pushed_total" in push and "dataq_records_done_total" not in push
    assert pop["dataq_records_done_total", frozenset({("queue", "transfer")})] == 0
    assert "dataq_records_pushed_total" not in {name for name, _ in pop}
    with pytest.raises(ValueError, match="role"):
        DaemonMetrics("transfer", "sweep", dict)


def test_histograms_count_into_cumulative_buckets_ending_in_inf() -> None:
    metrics = DaemonMetrics("transfer", "pop", dict)
    for seconds in (0.004, 0.02, 0.02, 700.0):
        metrics.action_duration("echo", seconds)
    got = samples(metrics)
    labels = {("queue", "transfer"), ("action", "echo")}
    assert got["dataq_action_duration_seconds_bucket", frozenset({*labels, ("le", "0.005")})] == 1
    assert got["dataq_action_duration_seconds_bucket", frozenset({*labels, ("le", "0.025")})] == 3
    assert got["dataq_action_duration_seconds_bucket", frozenset({*labels, ("le", "600.0")})] == 3
    assert got["dataq_action_duration_seconds_bucket", frozenset({*labels, ("le", "+Inf")})] == 4
    assert got["dataq_action_duration_seconds_count", frozenset(labels)] == 4
    assert got["dataq_action_duration_seconds_sum", frozenset(labels)] == pytest.approx(700.044)


def test_a_claim_latency_from_a_skewed_clock_counts_as_zero() -> None:
    metrics = DaemonMetrics("transfer", "pop", dict)
    metrics.claim_latency(-2.0)
    got = samples(metrics)
    assert got["dataq_claim_latency_seconds_bucket", frozenset({("queue", "transfer"), ("le", "0.01")})] == 1
    assert got["dataq_claim_latency_seconds_sum", frozenset({("queue", "transfer")})] == 0


def test_queue_gauges_appear_once_the_cache_holds_a_summary() -> None:
    metrics = DaemonMetrics("transfer", "pop", dict)
    before = samples(metrics)
    assert before["dataq_redis_up", frozenset({("queue", "transfer")})] == 0
    assert not any(name == "dataq_queue_length" for name, _ in before)
    metrics.set_summary(Summary("transfer", active=5, inactive=2, delayed=1, in_flight=3, tracked=11, action=False,
                                read=True, workers=2, counters={"pushed": 12, "done": 1}))
    after = samples(metrics)
    q = ("queue", "transfer")
    assert after["dataq_redis_up", frozenset({q})] == 1
    assert after["dataq_queue_length", frozenset({q, ("list", "active")})] == 5
    assert after["dataq_queue_length", frozenset({q, ("list", "tracked")})] == 11
    assert after["dataq_flag", frozenset({q, ("flag", "action")})] == 0
    assert after["dataq_flag", frozenset({q, ("flag", "read")})] == 1
    assert after["dataq_workers", frozenset({q})] == 2
    assert after["dataq_queue_events_total", frozenset({q, ("event", "pushed")})] == 12
    assert not any(name == "dataq_queue_rate_per_minute" for name, _ in after)  # no rates read yet


def test_the_rates_of_the_last_minute_are_a_gauge_per_kind() -> None:
    metrics = DaemonMetrics("transfer", "push", dict)
    metrics.set_summary(Summary("transfer", active=0, inactive=0, delayed=0, in_flight=0, tracked=0, action=True,
                                read=True, workers=1, counters={}),
                        Rates({"pushed": 600.0, "done": 540.5, "failed": 0.0}, 60.0, 55.0, True))
    got = samples(metrics)
    q = ("queue", "transfer")
    assert got["dataq_queue_rate_per_minute", frozenset({q, ("kind", "pushed")})] == 600.0
    assert got["dataq_queue_rate_per_minute", frozenset({q, ("kind", "done")})] == 540.5
    assert got["dataq_queue_rate_per_minute", frozenset({q, ("kind", "failed")})] == 0.0


def test_an_unreachable_destination_is_1_while_it_lasts_and_0_once_it_is_back() -> None:
    metrics = DaemonMetrics("transfer", "pop", lambda: {"waited": 12})
    key = ("dataq_destination_unreachable", frozenset({("queue", "transfer"), ("destination", "rsync://valley/m")}))
    assert key not in samples(metrics)
    metrics.destination_unreachable("rsync://valley/m", True)
    assert samples(metrics)[key] == 1
    metrics.destination_unreachable("rsync://valley/m", False)
    assert samples(metrics)[key] == 0
    assert samples(metrics)["dataq_records_waited_total", frozenset({("queue", "transfer")})] == 12


EMPTY = Summary("transfer", active=0, inactive=0, delayed=0, in_flight=0, tracked=0, action=True, read=True,
                workers=1, counters={})


def test_replication_is_exported_once_a_highly_available_daemon_has_looked_at_it() -> None:
    metrics = DaemonMetrics("transfer", "push", dict)
    metrics.set_summary(EMPTY)
    assert not any(name.startswith("dataq_replication") for name, _ in samples(metrics))
    metrics.replication(replicas=1, problems=2)
    got = samples(metrics)
    assert got["dataq_replication_replicas", frozenset({("queue", "transfer")})] == 1
    assert got["dataq_replication_problems", frozenset({("queue", "transfer")})] == 2


def test_the_age_of_a_waiting_list_counts_from_its_oldest_push_and_is_0_when_empty() -> None:
    metrics = DaemonMetrics("transfer", "pop", dict)
    metrics.set_summary(EMPTY, oldest={"active": time.time() - 120})
    got = samples(metrics)
    q = ("queue", "transfer")
    assert 120 <= got["dataq_queue_oldest_age_seconds", frozenset({q, ("list", "active")})] < 125
    assert got["dataq_queue_oldest_age_seconds", frozenset({q, ("list", "delayed")})] == 0


def test_every_daemon_exports_its_process_and_only_families_the_exported_list_names() -> None:
    for role in ("push", "pop"):
        metrics = DaemonMetrics("transfer", role, dict)
        metrics.set_summary(EMPTY, oldest={})
        metrics.replication(1, 0)
        text = generate_latest(metrics.registry).decode()
        families = {family.name + ("_total" if family.type == "counter" else "")
                    for family in text_string_to_metric_families(text)}
        assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "python_info"} <= families
        assert families <= EXPORTED_METRICS
