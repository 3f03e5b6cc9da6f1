"""The metrics endpoint scraped over HTTP while a queue is worked: what it reports matches what was done."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

import pytest

from dataq.errors import DataqError
from dataq.metrics import CONTENT_TYPE, DaemonMetrics, MetricsServer
from dataq.redis_server import free_port
from dataq.store import FailOutcome, Flag, QueueStore
from tests.helpers import make_records

WORKER = "host:1:pop:abc"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw ``request`` bytes; the status, headers and body of the reply."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, body


async def scrape(port: int) -> Samples:
    status, headers, body = await http(port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert status == 200
    assert headers["Content-Type"] == CONTENT_TYPE
    assert int(headers["Content-Length"]) == len(body)
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


@pytest.fixture
async def served(store: QueueStore) -> AsyncIterator[tuple[DaemonMetrics, int]]:
    metrics = DaemonMetrics("transfer", "pop")
    metrics.watch(store)
    server = MetricsServer(metrics.registry, "127.0.0.1", 0, request_timeout=0.5)
    port = await server.start()
    yield metrics, port
    await server.close()


async def test_scraped_counters_and_queue_gauges_match_what_was_done(
    store: QueueStore, served: tuple[DaemonMetrics, int]
) -> None:
    metrics, port = served
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
    metrics.done(3)
    outcomes = await store.fail(WORKER, [(record.id, "boom") for record in claim.records[3:]], max_errors=0)
    metrics.failed(len(outcomes))
    metrics.deactivated(outcomes.count(FailOutcome.INACTIVE))
    metrics.redis_reconnect()

    after = await scrape(port)
    q = {"queue": "transfer"}
    assert sample(after, "dataq_records_done_total", **q) == 3
    assert sample(after, "dataq_records_failed_total", **q) == 2
    assert sample(after, "dataq_records_deactivated_total", **q) == 2
    assert sample(after, "dataq_redis_reconnects_total", **q) == 1
    assert sample(after, "dataq_action_duration_seconds_count", action="echo", **q) == 5
    assert sample(after, "dataq_action_duration_seconds_bucket", action="echo", le="0.025", **q) == 5
    assert sample(after, "dataq_claim_latency_seconds_count", **q) == 5
    # The queue as Redis holds it, read at scrape time:
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


async def test_a_flag_switched_off_shows_at_the_next_scrape(
    store: QueueStore, served: tuple[DaemonMetrics, int]
) -> None:
    _, port = served
    await store.set_flag(Flag.ACTION, False)
    assert sample(await scrape(port), "dataq_flag", queue="transfer", flag="action") == 0


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /nope HTTP/1.1\r\n\r\n", 404),
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"GET /metrics\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # a TLS hello on the plain port
        (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\n", 408),  # headers never finished
    ],
)
async def test_bad_requests_get_an_error_and_the_server_keeps_serving(
    served: tuple[DaemonMetrics, int], request_bytes: bytes, status: int
) -> None:
    _, port = served
    assert (await http(port, request_bytes))[0] == status
    assert await scrape(port)


async def test_a_client_that_connects_and_leaves_does_not_disturb_the_server(served: tuple[DaemonMetrics, int]) -> None:
    _, port = served
    for _ in range(5):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        await writer.wait_closed()
    assert await scrape(port)


async def test_head_gets_the_headers_without_the_body(served: tuple[DaemonMetrics, int]) -> None:
    _, port = served
    status, headers, body = await http(port, b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n")
    assert (status, body) == (200, b"")
    assert int(headers["Content-Length"]) > 0


async def test_with_redis_down_the_scrape_still_answers_and_says_so() -> None:
    dead = QueueStore.from_url(f"redis://127.0.0.1:{free_port()}", "transfer")
    metrics = DaemonMetrics("transfer", "push")
    metrics.watch(dead)
    metrics.pushed(4)
    try:
        async with MetricsServer(metrics.registry) as server:
            samples = await scrape(server.port)
    finally:
        await dead.close()
    assert sample(samples, "dataq_redis_up", queue="transfer") == 0
    assert sample(samples, "dataq_records_pushed_total", queue="transfer") == 4


async def test_a_port_in_use_is_a_clear_error() -> None:
    async with MetricsServer(DaemonMetrics("transfer", "push").registry) as first:
        with pytest.raises(DataqError, match=f"cannot serve metrics on 127.0.0.1:{first.port}"):
            await MetricsServer(DaemonMetrics("transfer", "push").registry, port=first.port).start()
