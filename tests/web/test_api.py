"""The console's JSON API against a real Redis: what it reads, and that only the operator token can act."""

from __future__ import annotations

from typing import Any

import pytest

from dataq.store import Flag, QueueList, QueueStore
from tests.helpers import make_records
from tests.web.conftest import TOKEN, WORKER, Web

BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def fail_once(store: QueueStore, count: int, message: str) -> list[str]:
    """Push ``count`` records and fail each for good (max_errors 0): they land in the inactive list."""
    records = make_records(count)
    await store.push_batch(records, "test")
    await store.heartbeat(WORKER, {"role": "pop", "host": "host-1", "pid": 4242}, {"done": 3, "failed": 1}, ttl=30)
    claim = await store.claim(WORKER, count)
    await store.fail(WORKER, [(record.id, message) for record in claim.records], max_errors=0)
    return [record.id for record in claim.records]


async def get(web: Web, path: str, status: int = 200) -> Any:
    response = await web.client.get(path)
    assert response.status == status, await response.text()
    return await response.json()


async def post(web: Web, path: str, body: Any = None, status: int = 200, headers: dict[str, str] | None = None) -> Any:
    response = await web.client.post(path, json=body, headers=BEARER if headers is None else headers)
    assert response.status == status, await response.text()
    return await response.json()


async def test_every_configured_queue_is_listed_with_counts_flags_workers_rates_and_outages(web: Web) -> None:
    await web.transfer.push_batch(make_records(5), "test")
    await fail_once(web.stores["ingest"], 2, "disk full")
    queues = await get(web, "/api/queues")
    assert [q["name"] for q in queues] == ["transfer", "ingest"]
    transfer, ingest = queues
    assert (transfer["active"], transfer["inactive"], transfer["in_flight"], transfer["delayed"]) == (5, 0, 0, 0)
    assert (transfer["action"], transfer["read"], transfer["workers"], transfer["unreachable"]) == (True, True, 0, [])
    assert transfer["rates"]["pushed_per_minute"] > 0 and transfer["rates"]["complete"] is True
    assert (transfer["eta"], transfer["eta_seconds"]) == ("unknown: no pop daemon of the queue is running", None)
    assert (ingest["eta"], ingest["eta_seconds"]) == ("nothing waits", 0.0)
    assert (ingest["inactive"], ingest["workers"]) == (2, 1)
    assert ingest["rates"]["failed_per_minute"] > 0
    alone = await get(web, "/api/queues/ingest")
    assert {k: v for k, v in alone.items() if k != "rates"} == {k: v for k, v in ingest.items() if k != "rates"}


async def test_inactive_records_come_with_their_error_count_and_last_error(web: Web) -> None:
    ids = await fail_once(web.transfer, 3, "rsync: connection refused")
    inactive = await get(web, "/api/queues/transfer/inactive")
    assert {r["checksum"] for r in inactive} == set(ids)
    assert {(r["errors"], r["last_error"]) for r in inactive} == {(1, "rsync: connection refused")}
    assert {"path", "size"} <= set(inactive[0])
    assert len(await get(web, "/api/queues/transfer/inactive?offset=1&limit=1")) == 1


async def test_workers_events_active_records_and_the_hour_of_rates(web: Web) -> None:
    await fail_once(web.transfer, 1, "boom")
    await web.transfer.push_batch(make_records(4, start=10), "test")
    workers = await get(web, "/api/queues/transfer/workers")
    assert [(w["worker"], w["host"], w["pid"], w["alive"], w["done"], w["failed"]) for w in workers] == [
        (WORKER, "host-1", 4242, True, 3, 1)]
    events = await get(web, "/api/queues/transfer/events")
    assert events[0]["kind"] == "pushed" and events[-1]["kind"] == "pushed"  # newest first: the last push
    assert "deactivated" in {e["kind"] for e in events}
    assert len(await get(web, "/api/queues/transfer/active?limit=2")) == 2
    rates = await get(web, "/api/queues/transfer/rates")
    buckets = rates["buckets"]
    assert len(buckets) == 360 and [b["start"] for b in buckets] == sorted(b["start"] for b in buckets)
    # The five pushes fall in the newest bucket or two (a 10 s boundary may pass between them).
    assert sum(b["pushed"] for b in buckets[-2:]) == 5


async def test_a_record_shows_where_it_is_in_whichever_queue_holds_it(web: Web) -> None:
    (record_id,) = await fail_once(web.stores["ingest"], 1, "checksum mismatch")
    record = await get(web, f"/api/records/{record_id}")
    assert (record["queue"], record["where"], record["errors"], record["last_error"]) == (
        "ingest", "inactive", 1, "checksum mismatch")
    assert record["fields"]["checksum"] == record_id and record["description"] == "inactive"
    assert [e["kind"] for e in record["events"]] == ["pushed", "claimed", "deactivated"]


async def test_unknown_queues_records_and_bad_pages_are_clear_errors(web: Web) -> None:
    assert (await get(web, "/api/queues/nosuch", 404))["error"] == (
        "no queue 'nosuch'; the queues are: transfer, ingest")
    assert "no queue tracks record" in (await get(web, "/api/records/" + "0" * 32, 404))["error"]
    assert "offset must be 0 or more" in (await get(web, "/api/queues/transfer/inactive?offset=-1", 400))["error"]
    assert "whole numbers" in (await get(web, "/api/queues/transfer/active?limit=ten", 400))["error"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-0123456789"},
                                     {"Authorization": f"Basic {TOKEN}"}])
async def test_without_the_token_every_action_is_refused_and_nothing_changes(web: Web, headers: dict[str, str]) -> None:
    ids = await fail_once(web.transfer, 2, "boom")
    for op, body in [("action", {"on": False}), ("read", {"on": False}), ("redo", None),
                     ("activate", {"first": ids[0], "last": ids[-1]}), ("retry", {"id": ids[0]})]:
        refused = await post(web, f"/api/queues/transfer/{op}", body, 401, headers)
        assert "operator token is needed" in refused["error"]
    summary = await web.transfer.summary()
    assert (summary.action, summary.read, summary.inactive) == (True, True, 2)


async def test_a_console_without_a_token_is_read_only(read_only: Web) -> None:
    assert await get(read_only, "/api/queues")
    refused = await post(read_only, "/api/queues/transfer/action", {"on": False}, 401, {"Authorization": "Bearer "})
    assert "read-only" in refused["error"]


async def test_with_the_token_the_flags_switch(web: Web) -> None:
    assert await post(web, "/api/queues/transfer/action", {"on": False}) == {
        "queue": "transfer", "flag": "action", "on": False}
    await post(web, "/api/queues/transfer/read", {"on": False})
    summary = await web.transfer.summary()
    assert (summary.action, summary.read) == (False, False)
    await post(web, "/api/queues/transfer/action", {"on": True})
    assert (await web.transfer.summary()).action is True
    assert "needs \"on\": true or false" in (await post(web, "/api/queues/transfer/read", {"on": "yes"}, 400))["error"]


async def test_with_the_token_records_move_by_range_one_by_one_or_all(web: Web) -> None:
    ids = await fail_once(web.transfer, 4, "boom")
    newest_first = [r.id for r in await web.transfer.list_records(QueueList.INACTIVE)]
    assert await post(web, "/api/queues/transfer/retry", {"id": ids[0]}) == {"queue": "transfer", "moved": 1}
    assert (await web.transfer.record_state(ids[0])).where == "active"  # type: ignore[union-attr]
    rest = [i for i in newest_first if i != ids[0]]
    assert (await post(web, "/api/queues/transfer/activate", {"first": rest[0], "last": rest[0]}))["moved"] == 1
    assert (await post(web, "/api/queues/transfer/redo"))["moved"] == 2
    active = [r.id for r in await web.transfer.list_records(QueueList.ACTIVE)]
    assert (await post(web, "/api/queues/transfer/deactivate", {"first": active[0], "last": active[1]}))["moved"] == 2
    active = [r.id for r in await web.transfer.list_records(QueueList.ACTIVE)]
    assert (await post(web, "/api/queues/transfer/advance", {"first": active[0], "last": active[0]}))["moved"] == 1
    assert (await web.transfer.list_records(QueueList.ACTIVE))[-1].id == active[0]  # next to run


async def test_malformed_actions_are_refused_with_the_reason(web: Web) -> None:
    assert "must be a record id" in (await post(web, "/api/queues/transfer/activate", {"first": "x"}, 400))["error"]
    assert "unknown action 'explode'" in (await post(web, "/api/queues/transfer/explode", {}, 400))["error"]
    for body in (b"{not json", b"\xff\xfe", b"[1, 2]"):
        response = await web.client.post("/api/queues/transfer/action", data=body, headers=BEARER)
        assert response.status == 400 and "JSON object" in (await response.json())["error"]
    missing = await post(web, "/api/queues/transfer/activate", {"first": "0" * 32, "last": "0" * 32}, 400)
    assert missing["error"]
    assert (await post(web, "/api/queues/nosuch/redo", None, 404))["error"].startswith("no queue 'nosuch'")


async def test_set_flags_are_what_the_daemons_read(web: Web) -> None:
    await post(web, "/api/queues/ingest/action", {"on": False})
    assert (await web.stores["ingest"].flags())[Flag.ACTION] is False
