"""A queue's conditions, as the web console shows them: each from the vitals that cause it, worst first, with the
severity and the threshold of the alert rule that says the same."""

from __future__ import annotations

import dataclasses
import re

import pytest

from dataq.config import HealthSettings
from dataq.ops.conditions import Condition, Found, Severity, Vitals, activity_condition, conditions_of, redis_down
from dataq.ops.health import OutsideWindow, Unreachable
from tests.unit.test_alert_rules import rules

NOW = 1_800_000_000.0
DEFAULTS = HealthSettings()
CALM = Vitals(now=NOW, active=10, inactive=0, action=True, oldest_active=NOW - 5, done_recently=40,
              recent_span=900, pushed_hour=600, done_hour=590, hour_span=3600)


def names(vitals: Vitals, thresholds: HealthSettings = DEFAULTS) -> list[Condition]:
    return [found.condition for found in conditions_of(vitals, thresholds)]


def test_a_queue_that_keeps_up_is_healthy() -> None:
    (found,) = conditions_of(CALM, DEFAULTS)
    assert (found.condition, found.condition.severity) == (Condition.HEALTHY, Severity.OK)


@pytest.mark.parametrize(("change", "expected"), [
    ({"oldest_active": NOW - 3601}, Condition.BACKLOG_OLD),
    ({"done_recently": 0, "oldest_active": NOW - 901}, Condition.STALLED),
    ({"active": 5000, "pushed_hour": 4000, "done_hour": 3000}, Condition.BACKLOG_GROWING),
    ({"inactive": 3}, Condition.INACTIVE_RECORDS),
    ({"custody_since": NOW - 21601}, Condition.RECEIPTS_OVERDUE),
    ({"replication_problems": ("replica 127.0.0.1:7001 is down",)}, Condition.REPLICATION_DEGRADED),
    ({"audits": {"dir:/data": {"counts": {"arrived": 9, "never_fed": 2}}}}, Condition.AUDIT_FOUND_FILES),
    ({"action": False}, Condition.PAUSED),
    ({"unreachable": (Unreachable("rsync://valley/in", NOW - 60, "refused", 10, ("w",)),)},
     Condition.DESTINATION_UNREACHABLE),
    ({"outside": (OutsideWindow("rsync://valley/in", "19:00-07:00", NOW + 600),)}, Condition.OUTSIDE_WINDOW),
])
def test_each_condition_is_found_from_what_causes_it(change: dict[str, object], expected: Condition) -> None:
    assert names(dataclasses.replace(CALM, **change)) == [expected]  # type: ignore[arg-type]


@pytest.mark.parametrize("change", [
    {"oldest_active": NOW - 3599},                                   # not an hour yet
    {"done_recently": 0, "oldest_active": NOW - 60},                 # the first record came a minute ago
    {"done_recently": 0, "oldest_active": NOW - 901, "recent_span": 100},  # the ring did not count that long
    {"active": 900, "pushed_hour": 4000, "done_hour": 3000},         # growing, but a small queue
    {"active": 5000, "pushed_hour": 4000, "done_hour": 3000, "hour_span": 600},  # too short a span to tell
    {"custody_since": NOW - 21599},
    {"audits": {"copies:/archive": {"counts": {"arrived": 9, "dark": 4, "in_flight": 1}}}},
])
def test_what_is_not_yet_a_condition_leaves_the_queue_healthy(change: dict[str, object]) -> None:
    assert names(dataclasses.replace(CALM, **change)) == [Condition.HEALTHY]  # type: ignore[arg-type]


def test_a_paused_queue_is_neither_stalled_nor_late_since_waiting_is_the_operators_decision() -> None:
    paused = dataclasses.replace(CALM, action=False, done_recently=0, oldest_active=NOW - 7200)
    assert names(paused) == [Condition.PAUSED]


def test_a_destination_down_explains_the_wait_so_the_queue_is_not_called_stalled() -> None:
    down = dataclasses.replace(CALM, done_recently=0, oldest_active=NOW - 7200, inactive=1,
                               unreachable=(Unreachable("rsync://valley/in", NOW - 7000, "refused", 10, ("w",)),))
    found = conditions_of(down, DEFAULTS)
    assert [item.condition for item in found] == [Condition.DESTINATION_UNREACHABLE, Condition.BACKLOG_OLD,
                                                  Condition.INACTIVE_RECORDS]
    assert found[0].since == NOW - 7000 and "rsync://valley/in unreachable: refused" in found[0].detail
    assert found[1].detail == "the next record to run has waited 2.0 h"


def test_thresholds_come_from_the_settings() -> None:
    strict = HealthSettings(backlog_old=60)
    assert names(dataclasses.replace(CALM, oldest_active=NOW - 61), strict) == [Condition.BACKLOG_OLD]


def test_a_queue_out_of_reach_says_so_and_nothing_else() -> None:
    (found,) = redis_down("redis at 127.0.0.1:1 refused the connection")
    assert found.doc() == {"condition": "redis_down", "words": "redis down", "severity": "page",
                           "alert": "DataqRedisDown", "detail": "redis at 127.0.0.1:1 refused the connection",
                           "since": None}


def test_an_activity_is_stalled_or_late_only_when_its_own_records_wait_undone() -> None:
    queue = conditions_of(CALM, DEFAULTS)
    late, fresh = NOW - 4000, NOW - 5

    def state(found: list[Found], active: int, per_minute: float, oldest: float | None) -> Condition:
        return activity_condition(found, NOW, active, per_minute, oldest, DEFAULTS).condition

    assert state(queue, 5, 0.0, late) is Condition.STALLED
    assert state(queue, 5, 12.0, late) is Condition.BACKLOG_OLD, "done at its share, but its oldest is late"
    assert state(queue, 5, 0.0, fresh) is Condition.HEALTHY, "its first record has just come"
    assert state(queue, 0, 0.0, None) is Condition.HEALTHY
    paused = [Found(Condition.PAUSED, "off")]
    assert state(paused, 5, 0.0, late) is Condition.PAUSED, "waiting is the operator's decision"
    down = [Found(Condition.DESTINATION_UNREACHABLE, "valley"), Found(Condition.INACTIVE_RECORDS, "3")]
    assert state(down, 5, 12.0, fresh) is Condition.DESTINATION_UNREACHABLE, "a destination is every activity's"
    assert state(down, 0, 0.0, None) is Condition.DESTINATION_UNREACHABLE


def threshold(alert: str, pattern: str) -> float:
    (rule,) = [rule for rule in rules() if rule.get("alert") == alert]
    found = re.search(pattern, rule["expr"])
    assert found is not None, f"{alert}'s expression no longer matches {pattern!r}: {rule['expr']}"
    return float(found.group(1))


def test_every_condition_with_an_alert_names_a_rule_of_the_same_severity() -> None:
    by_name = {rule["alert"]: rule for rule in rules() if "alert" in rule}
    for condition in Condition:
        if condition.alert is not None:
            assert by_name[condition.alert]["labels"]["severity"] == condition.severity.value, condition


def test_the_default_thresholds_are_the_alert_rules_own() -> None:
    assert DEFAULTS.backlog_old == threshold("DataqBacklogOld", r"\{list=\"active\"\}\) > (\d+)")
    assert DEFAULTS.growing_per_hour == threshold("DataqQueueGrowing", r"\* 3600 > (\d+)")
    assert DEFAULTS.growing_above == threshold("DataqQueueGrowing", r"\{list=\"active\"\}\) > (\d+)\n")
    assert DEFAULTS.stalled_after == 60 * threshold("DataqQueueStalled", r"\[(\d+)m\]\)\) == 0")
    assert DEFAULTS.receipts_overdue == threshold("DataqReceiptsOverdue", r"> (\d+)")
