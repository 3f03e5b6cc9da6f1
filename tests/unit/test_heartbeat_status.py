"""What a pop daemon's heartbeat gathers from its actions (``merge_status``)."""

from __future__ import annotations

from dataq.ops.documents import WAITING_KEY
from dataq.pop.worker import merge_status


def test_two_actions_waiting_for_their_destinations_are_both_named() -> None:
    stats: dict[str, object] = {"done": 3}
    merge_status(stats, {WAITING_KEY: {"rsync://valley/in": {"max_connections": 1, "open": 1, "ids": ["a"]}}})
    merge_status(stats, {WAITING_KEY: {"/archive": {"max_connections": 2, "open": 2, "ids": ["b"]}}})
    merge_status(stats, {})
    assert stats == {"done": 3, WAITING_KEY: {
        "rsync://valley/in": {"max_connections": 1, "open": 1, "ids": ["a"]},
        "/archive": {"max_connections": 2, "open": 2, "ids": ["b"]}}}
