"""The metric names a PromQL query reads, for the tests of the shipped rules and dashboard (that they name only
what dataq exports, :data:`dataq.ops.exported.EXPORTED_METRICS`).

Not a PromQL parser: a tokenizer that removes everything in a query that is not a metric name (strings, label
matchers, ranges, grouping and matching clauses, function and aggregation names, keywords, numbers, durations and
Grafana's ``$variables``); what remains are the names of the series selected. Enough for the queries people
write on dashboards and in rules, and its own test pins what it recognises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_CALL = re.compile(r"\b[a-zA-Z_]\w*\s*\(")
_NUMBER = re.compile(r"(?<![\w:])(?:0x[0-9a-fA-F]+|\d[\w.]*(?:[eE][+-]?\d+)?)")
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "inf", "nan", "atan2",
})
"""Words of PromQL that are no metric name (matched without regard to case, as PromQL does for these)."""
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def metric_names(query: str) -> set[str]:
    """The names of the metrics ``query`` selects, as written (``..._bucket`` stays ``..._bucket``)."""
    text = _STRING.sub(" ", query)
    text = _GRAFANA_VARIABLE.sub(" ", text)  # before the matchers: ${queue} holds braces
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _CLAUSE.sub(" ", text)
    text = re.sub(r"\b(?:group_left|group_right)\b", " ", text)  # without a label list
    text = _CALL.sub("(", text)
    text = _NUMBER.sub(" ", text)
    return {name for name in _IDENTIFIER.findall(text) if name.lower() not in KEYWORDS}


def family(name: str, exported: Iterable[str]) -> str:
    """The exported family of the series ``name``: a histogram's ``_bucket``, ``_sum`` and ``_count`` series
    belong to the histogram's name; any other name is its own family."""
    known = frozenset(exported)
    for suffix in HISTOGRAM_SERIES:
        base = name.removesuffix(suffix)
        if base != name and base in known and not base.endswith("_total"):
            return base
    return name


def unknown_metrics(query: str, exported: Iterable[str]) -> set[str]:
    """The names ``query`` selects that are no family of ``exported``."""
    known = frozenset(exported)
    return {name for name in metric_names(query) if family(name, known) not in known}
