"""The Prometheus registry: the text exposition format, and the rules a metric keeps."""

from __future__ import annotations

import pytest

from dataq.metrics import DaemonMetrics, Registry


def test_counters_and_gauges_render_help_type_and_one_line_per_series() -> None:
    registry = Registry()
    counter = registry.counter("jobs_total", "Jobs done.", ("queue",))
    counter.labels(queue="a").inc()
    counter.labels(queue="a").inc(2)
    counter.labels(queue="b").inc(0.5)
    registry.gauge("temperature", "Now.").labels().set(-3)
    assert registry.render() == (
        "# HELP jobs_total Jobs done.\n"
        "# TYPE jobs_total counter\n"
        'jobs_total{queue="a"} 3\n'
        'jobs_total{queue="b"} 0.5\n'
        "# HELP temperature Now.\n"
        "# TYPE temperature gauge\n"
        "temperature -3\n"
    )


def test_histograms_render_cumulative_buckets_ending_in_inf_then_sum_and_count() -> None:
    registry = Registry()
    histogram = registry.histogram("latency_seconds", "Latency.", ("queue",), buckets=(0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 7.0):
        histogram.labels(queue="q").observe(value)
    lines = registry.render().splitlines()[2:]
    assert lines == [
        'latency_seconds_bucket{queue="q",le="0.1"} 2',
        'latency_seconds_bucket{queue="q",le="1"} 3',
        'latency_seconds_bucket{queue="q",le="+Inf"} 4',
        'latency_seconds_sum{queue="q"} 7.65',
        'latency_seconds_count{queue="q"} 4',
    ]


def test_label_values_and_help_are_escaped() -> None:
    registry = Registry()
    registry.counter("c_total", 'Back\\slash and\nnewline.', ("path",)).labels(path='a"b\\c\nd').inc()
    text = registry.render()
    assert "# HELP c_total Back\\\\slash and\\nnewline.\n" in text
    assert 'c_total{path="a\\"b\\\\c\\nd"} 1\n' in text


def test_a_counter_only_goes_up() -> None:
    counter = Registry().counter("c_total", "C.").labels()
    with pytest.raises(ValueError, match="only goes up"):
        counter.inc(-1)


def test_misuse_is_refused() -> None:
    registry = Registry()
    registry.counter("c_total", "C.", ("queue",))
    with pytest.raises(ValueError, match="already registered"):
        registry.gauge("c_total", "again")
    with pytest.raises(ValueError, match="invalid metric name"):
        registry.counter("bad-name", "x")
    with pytest.raises(ValueError, match="invalid label name"):
        registry.counter("x_total", "x", ("__reserved",))
    with pytest.raises(ValueError, match="cannot have a label named 'le'"):
        registry.histogram("h", "x", ("le",))
    with pytest.raises(ValueError, match="takes labels"):
        Registry().counter("y_total", "y", ("queue",)).labels(queue="a", extra="b")


def test_a_daemon_exports_zero_for_its_own_counters_only() -> None:
    push = DaemonMetrics("transfer", "push").registry.render()
    pop = DaemonMetrics("transfer", "pop").registry.render()
    assert 'dataq_records_pushed_total{queue="transfer"} 0' in push
    assert "dataq_records_done_total{" not in push
    assert 'dataq_records_done_total{queue="transfer"} 0' in pop
    assert "dataq_records_pushed_total{" not in pop
    with pytest.raises(ValueError, match="role"):
        DaemonMetrics("transfer", "sweep")
