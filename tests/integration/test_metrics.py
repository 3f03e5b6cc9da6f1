"""The metrics endpoint scraped over HTTP while a queue is worked: what it reports matches what was done."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

from dataq.activities import Activity, Plan
from dataq.embedded.redis_server import free_port
from dataq.errors import DataqError
from dataq.ops.exposition import MetricsServer
from dataq.ops.metrics import DaemonMetrics
from dataq.store import FailOutcome, Flag, QueueStore, RetryPolicy, Summary
from tests.helpers import make_records

WORKER = "host:1:pop:abc"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def http(port: int, request: bytes) -> tuple[int | None, dict[str, str], bytes]:
    """Send raw ``request`` bytes; the status, headers and body of the reply. The status is None when no HTTP/1
    response came: the connection was closed, or the server took the request for HTTP/0.9 and answered with a
    bare error page, as HTTP/0.9 has no status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    if not reply.startswith(b"HTTP/1."):
        return None, {}, reply
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, body


async def scrape(port: int) -> Samples:
    status, headers, body = await http(port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert status == 200
    assert headers["Content-Type"] == CONTENT_TYPE_PLAIN_0_0_4
    samples: Samples = {}
    for line in body.decode().splitlines():
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        samples[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return samples


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


Served = tuple[DaemonMetrics, dict[str, int], int]
"""The metrics, the daemon's running totals they export, and the port they are served on."""


@pytest.fixture
async def served(store: QueueStore) -> AsyncIterator[Served]:
    totals = {"done": 0, "failed": 0, "deactivated": 0}
    metrics = DaemonMetrics("transfer", "pop", lambda: totals)
    server = MetricsServer(metrics.registry, "127.0.0.1", 0, request_timeout=0.5)
    port = await asyncio.to_thread(server.start)
    yield metrics, totals, port
    await asyncio.to_thread(server.close)


async def test_scraped_counters_and_queue_gauges_match_what_was_done(store: QueueStore, served: Served) -> None:
    metrics, totals, port = served
    assert await metrics.refresh(store) is None
    before = await scrape(port)
    assert sample(before, "dataq_records_done_total", queue="transfer") == 0
    assert sample(before, "dataq_redis_up", queue="transfer") == 1

    records = make_records(10)
    result = await store.push_batch([*records, records[0]], "test")  # one duplicate
    assert result.pushed.count(False) == 1
    await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
    claim = await store.claim(WORKER, 5)
    for record in claim.records:
        metrics.claim_latency(time.time() - (record.pushed_at or time.time()))
        metrics.action_duration("echo", 0.02)
    await store.ack(WORKER, [(record.id, "ok") for record in claim.records[:3]])
    totals["done"] += 3
    outcomes = await store.fail(WORKER, [(record.id, "boom") for record in claim.records[3:]], max_errors=0)
    totals["failed"] += len(outcomes)
    totals["deactivated"] += outcomes.count(FailOutcome.INACTIVE)
    metrics.redis_reconnect()
    assert await metrics.refresh(store) is None  # what the daemon's Redis watch does every second

    after = await scrape(port)
    q = {"queue": "transfer"}
    assert sample(after, "dataq_records_done_total", **q) == 3
    assert sample(after, "dataq_records_failed_total", **q) == 2
    assert sample(after, "dataq_records_deactivated_total", **q) == 2
    assert sample(after, "dataq_redis_reconnects_total", **q) == 1
    assert sample(after, "dataq_action_duration_seconds_count", action="echo", **q) == 5
    assert sample(after, "dataq_action_duration_seconds_bucket", action="echo", le="0.025", **q) == 5
    assert sample(after, "dataq_claim_latency_seconds_count", **q) == 5
    # The queue as Redis holds it, read by the last refresh:
    assert sample(after, "dataq_queue_length", list="active", **q) == 5
    assert sample(after, "dataq_queue_length", list="inactive", **q) == 2
    assert sample(after, "dataq_queue_length", list="in_flight", **q) == 0
    assert sample(after, "dataq_queue_length", list="tracked", **q) == 7
    assert sample(after, "dataq_queue_events_total", event="pushed", **q) == 10
    assert sample(after, "dataq_queue_events_total", event="duplicate", **q) == 1
    assert sample(after, "dataq_queue_events_total", event="done", **q) == 3
    assert sample(after, "dataq_flag", flag="read", **q) == 1
    assert sample(after, "dataq_flag", flag="action", **q) == 1
    assert sample(after, "dataq_workers", **q) == 1
    # Rates over the last minute, from the rates ring: the current 10-second bucket and the five before it.
    assert 10 <= sample(after, "dataq_queue_rate_per_minute", kind="pushed", **q) <= 12
    assert 3 <= sample(after, "dataq_queue_rate_per_minute", kind="done", **q) <= 3.6
    assert 2 <= sample(after, "dataq_queue_rate_per_minute", kind="failed", **q) <= 2.4
    # The 5 active records at the done rate since records were first done: 3 in this 10-second bucket so far.
    assert 0 < sample(after, "dataq_queue_eta_seconds", **q) <= 5 / 3 * 10


async def test_a_flag_switched_off_shows_after_the_next_refresh(store: QueueStore, served: Served) -> None:
    metrics, _, port = served
    await metrics.refresh(store)
    await store.set_flag(Flag.ACTION, False)
    assert sample(await scrape(port), "dataq_flag", queue="transfer", flag="action") == 1  # the cache: no Redis call
    await metrics.refresh(store)
    assert sample(await scrape(port), "dataq_flag", queue="transfer", flag="action") == 0


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /nope HTTP/1.1\r\n\r\n", 404),
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"GET /metrics HTTP/1.one\r\n\r\n", None),  # a version it cannot read: HTTP/0.9's error page
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\n", None),  # headers never finished: dropped after the request timeout
    ],
)
async def test_bad_requests_get_an_error_and_the_server_keeps_serving(
    served: Served, request_bytes: bytes, status: int | None
) -> None:
    _, _, port = served
    assert (await http(port, request_bytes))[0] == status
    assert await scrape(port)


async def test_a_client_that_connects_and_leaves_or_sends_garbage_does_not_disturb_the_server(served: Served) -> None:
    _, _, port = served
    await http(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n")  # a TLS hello on the plain port
    for _ in range(5):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        await writer.wait_closed()
    assert await scrape(port)


async def test_a_stalled_client_does_not_hold_up_a_scrape(served: Served) -> None:
    _, _, port = served
    _, stalled = await asyncio.open_connection("127.0.0.1", port)
    stalled.write(b"GET /metrics HTTP/1.1\r\n")  # and nothing more
    await stalled.drain()
    try:
        assert await scrape(port)
    finally:
        stalled.close()
        await stalled.wait_closed()


async def test_with_redis_down_the_scrape_still_answers_and_says_so() -> None:
    dead = QueueStore.from_url(f"redis://127.0.0.1:{free_port()}", "transfer")
    metrics = DaemonMetrics("transfer", "push", lambda: {"pushed": 4})
    server = MetricsServer(metrics.registry)
    # What the last good read said: a backlog pushed 100 s before.
    metrics.set_summary(Summary("transfer", active=1, inactive=0, delayed=0, in_flight=0, tracked=1, action=True,
                                read=True, workers=1, counters={}), oldest={"active": time.time() - 100})
    try:
        assert await metrics.refresh(dead) is not None
        port = await asyncio.to_thread(server.start)
        samples = await scrape(port)
    finally:
        await asyncio.to_thread(server.close)
        await dead.close()
    assert sample(samples, "dataq_redis_up", queue="transfer") == 0
    assert sample(samples, "dataq_records_pushed_total", queue="transfer") == 4
    assert sample(samples, "dataq_queue_length", queue="transfer", list="active") == 1  # the last value read
    # An age from a stale read would grow for as long as Redis is away, and page for a backlog nobody can see.
    assert not any(name == "dataq_queue_oldest_age_seconds" for name, _ in samples)


async def test_a_port_in_use_is_a_clear_error() -> None:
    first = MetricsServer(DaemonMetrics("transfer", "push", dict).registry)
    port = first.start()
    try:
        with pytest.raises(DataqError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            MetricsServer(DaemonMetrics("transfer", "push", dict).registry, port=port).start()
    finally:
        first.close()


async def test_the_backlog_age_is_the_time_since_the_oldest_waiting_record_was_pushed(
    store: QueueStore, served: Served
) -> None:
    metrics, _, port = served
    await metrics.refresh(store)
    empty = await scrape(port)
    assert sample(empty, "dataq_queue_oldest_age_seconds", queue="transfer", list="active") == 0
    assert sample(empty, "dataq_queue_oldest_age_seconds", queue="transfer", list="delayed") == 0

    await store.push_batch(make_records(3), "test")
    pushed = time.time()
    await asyncio.sleep(0.3)
    await store.push_batch(make_records(3, start=3), "test")  # newer: the oldest stays the first three's
    await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
    claim = await store.claim(WORKER, 1)
    # The claimed record waits out a delay: it is no longer in the backlog, but in the delayed list.
    await store.fail(WORKER, [(claim.records[0].id, "boom")], max_errors=5, retry=RetryPolicy(delay=600))
    await metrics.refresh(store)
    after = await scrape(port)
    waited = time.time() - pushed
    active = sample(after, "dataq_queue_oldest_age_seconds", queue="transfer", list="active")
    delayed = sample(after, "dataq_queue_oldest_age_seconds", queue="transfer", list="delayed")
    assert 0.3 <= active <= waited + 0.05
    assert 0.3 <= delayed <= waited + 0.05


async def test_bytes_are_counted_per_action_and_destination(served: Served) -> None:
    metrics, _, port = served
    metrics.action_bytes("network_move", "rsync://valley/incoming", 1000)
    metrics.action_bytes("network_move", "rsync://valley/incoming", 24)
    metrics.action_bytes("disk_store", "/archive", 7)
    samples = await scrape(port)
    moved, q = "dataq_action_bytes_total", {"queue": "transfer"}
    assert sample(samples, moved, action="network_move", destination="rsync://valley/incoming", **q) == 1024
    assert sample(samples, moved, action="disk_store", destination="/archive", **q) == 7


async def test_a_record_put_back_at_the_end_of_the_line_does_not_age_the_backlog_until_it_is_next(
    store: QueueStore, served: Served
) -> None:
    metrics, _, port = served
    first = make_records(1)
    await store.push_batch(first, "test")
    await asyncio.sleep(0.5)
    await store.push_batch(make_records(1, start=1), "test")
    newer = time.time()
    await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
    (claimed,) = (await store.claim(WORKER, 1)).records
    assert claimed.id == first[0].id
    await store.fail(WORKER, [(claimed.id, "boom")], max_errors=5)  # retried at once: last in line
    await metrics.refresh(store)
    age = sample(await scrape(port), "dataq_queue_oldest_age_seconds", queue="transfer", list="active")
    assert age <= time.time() - newer + 0.05  # the newer record is next to run, and counts


async def test_a_queue_with_activities_exports_each_ones_backlog_done_records_and_eta(
        redis_url: str, served: Served) -> None:
    metrics, _, port = served
    plan = Plan((Activity("default"), Activity("express", 0), Activity("backfill", 1)))
    store = QueueStore.from_url(redis_url, "transfer", plan=plan)
    try:
        records = make_records(10)
        await store.push_batch([replace(r, activity="express") for r in records[:4]]
                               + [replace(r, activity="backfill") for r in records[4:]], "test")
        await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
        claim = await store.claim(WORKER, 6)  # strict first: the 4 express records, then 2 backfill ones
        await store.ack(WORKER, [(record.id, "ok") for record in claim.records])
        assert await metrics.refresh(store) is None
        after = await scrape(port)
    finally:
        await store.close()
    q = {"queue": "transfer"}
    assert sample(after, "dataq_activity_active_records", activity="express", **q) == 0
    assert sample(after, "dataq_activity_active_records", activity="backfill", **q) == 4
    assert sample(after, "dataq_activity_done_total", activity="express", **q) == 4
    assert sample(after, "dataq_activity_done_total", activity="backfill", **q) == 2
    # The 4 backfill records at its own rate: 2 done in this 10-second bucket so far.
    assert 0 < sample(after, "dataq_activity_eta_seconds", activity="backfill", **q) <= 4 / 2 * 10
    assert sample(after, "dataq_activity_eta_seconds", activity="express", **q) == 0
    assert not any(name == "dataq_queue_events_total" and ("event", "done@express") in labels
                   for name, labels in after)
