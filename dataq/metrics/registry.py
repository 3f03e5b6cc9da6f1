"""A small Prometheus registry: counters, gauges and histograms with labels, rendered in the text format.

No client library: the text exposition format (version 0.0.4) is a few lines of code, and a daemon that only
counts needs none of a client's multiprocess or push-gateway machinery. Everything here runs on the daemon's
event loop, so no locks.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from dataq.logs import get_logger

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Action durations: from a checksum check (milliseconds) to a large transfer (up to the default timeout)."""
COLLECT_TIMEOUT = 2.0
"""Seconds a scrape waits for the queue gauges; a slow Redis then gets the last values, well within
Prometheus's default scrape timeout of 10 s."""

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

log = get_logger()


def _format_value(number: float) -> str:
    value = float(number)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape(value: str) -> str:
    return _escape_help(value).replace('"', '\\"')


def _format_labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items()) + "}"


class CounterChild:
    """One labelled series of a counter: only goes up (a restart resets it to 0, which Prometheus expects)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up; got {amount}")
        self.value += amount

    def mirror(self, total: float) -> None:
        """Take the value of a total kept elsewhere (a Redis counter), rather than counting here."""
        self.value = float(total)


class GaugeChild:
    """One labelled series of a gauge: a value that is set."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)


class HistogramChild:
    """One labelled series of a histogram: observations counted into cumulative ``le`` buckets."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.count, self.sum = 0, 0.0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)  # the first bound >= value: its ``le`` bucket
        if index < len(self.bounds):
            self.counts[index] += 1
        self.count += 1
        self.sum += value


C = TypeVar("C", CounterChild, GaugeChild, HistogramChild)


class Metric(Generic[C]):
    """A metric family: a name, a help text, label names, and one child per combination of label values."""

    kind = "untyped"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        if _NAME.fullmatch(name) is None:
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if _LABEL.fullmatch(label) is None or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} of metric {name!r}")
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], C] = {}

    def labels(self, **values: str) -> C:
        """The series with these label values (every label name, no other), created at 0 on first use."""
        if set(values) != set(self.labelnames):
            raise ValueError(f"metric {self.name} takes labels {self.labelnames}, got {tuple(values)}")
        key = tuple(str(values[name]) for name in self.labelnames)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child()
        return child

    def _new_child(self) -> C:
        raise NotImplementedError

    def samples(self) -> Iterator[tuple[str, dict[str, str], float]]:
        """(sample name, labels, value) of every series."""
        for key, child in self._children.items():
            yield from self._child_samples(dict(zip(self.labelnames, key, strict=True)), child)

    def _child_samples(self, labels: dict[str, str], child: C) -> Iterator[tuple[str, dict[str, str], float]]:
        raise NotImplementedError

    def render(self) -> Iterator[str]:
        yield f"# HELP {self.name} {_escape_help(self.documentation)}"
        yield f"# TYPE {self.name} {self.kind}"
        for name, labels, value in self.samples():
            yield f"{name}{_format_labels(labels)} {_format_value(value)}"


class Counter(Metric[CounterChild]):
    kind = "counter"

    def _new_child(self) -> CounterChild:
        return CounterChild()

    def _child_samples(self, labels: dict[str, str],
                       child: CounterChild) -> Iterator[tuple[str, dict[str, str], float]]:
        yield self.name, labels, child.value


class Gauge(Metric[GaugeChild]):
    kind = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild()

    def _child_samples(self, labels: dict[str, str],
                       child: GaugeChild) -> Iterator[tuple[str, dict[str, str], float]]:
        yield self.name, labels, child.value


class Histogram(Metric[HistogramChild]):
    kind = "histogram"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 buckets: Iterable[float] = DEFAULT_BUCKETS) -> None:
        super().__init__(name, documentation, labelnames)
        if "le" in self.labelnames:
            raise ValueError(f"histogram {name!r} cannot have a label named 'le'")
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"histogram {name!r} needs distinct finite bucket bounds, got {buckets!r}")
        self.bounds = (*bounds, math.inf)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def _child_samples(self, labels: dict[str, str],
                       child: HistogramChild) -> Iterator[tuple[str, dict[str, str], float]]:
        cumulative = 0
        for bound, count in zip(child.bounds, child.counts, strict=True):
            cumulative += count
            yield f"{self.name}_bucket", {**labels, "le": _format_value(bound)}, cumulative
        yield f"{self.name}_sum", labels, child.sum
        yield f"{self.name}_count", labels, child.count


C_Metric = TypeVar("C_Metric", Counter, Gauge, Histogram)
Collector = Callable[[], Awaitable[None]]
"""Run before each scrape to bring gauges up to date (e.g. from ``store.summary()``)."""


class Registry:
    """The metrics of one process, and the collectors that refresh some of them at scrape time."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric[CounterChild] | Metric[GaugeChild] | Metric[HistogramChild]] = {}
        self._collectors: list[Collector] = []

    def _add(self, metric: C_Metric) -> C_Metric:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name!r} is already registered")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, documentation, labelnames))

    def gauge(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> Gauge:
        return self._add(Gauge(name, documentation, labelnames))

    def histogram(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                  buckets: Iterable[float] = DEFAULT_BUCKETS) -> Histogram:
        return self._add(Histogram(name, documentation, labelnames, buckets))

    def add_collector(self, collector: Collector) -> None:
        self._collectors.append(collector)

    async def collect(self, time_limit: float = COLLECT_TIMEOUT) -> None:
        """Run every collector, each within ``time_limit`` seconds; one that fails or is late is logged, and its
        gauges keep their last values."""
        for collector in self._collectors:
            try:
                async with asyncio.timeout(time_limit):
                    await collector()
            except TimeoutError:
                log.warning("metrics collector timed out; serving its last values", time_limit=time_limit)
            except Exception:
                log.exception("metrics collector failed; serving its last values")

    def render(self) -> str:
        """Every metric in the text exposition format."""
        return "".join(f"{line}\n" for metric in self._metrics.values() for line in metric.render())
