"""Receipts on the wire and custody in the store: what a push daemon answers about records, in order with the
other lines of a connection; what the custody scripts do with each answer; and bad receipts lines refused one
line each, disturbing nothing else."""

from __future__ import annotations

import json
import time

import pytest

from dataq.custody.client import ask
from dataq.custody.metrics import CUSTODY_OLDEST, CUSTODY_RECORDS, RECEIPT_LATENCY, RESENT, custody_families
from dataq.custody.receipts import MAX_RECEIPT_IDS
from dataq.errors import DataqError
from dataq.feed.link import client_tls_context
from dataq.store import CustodyEntry, CustodyStep, LastAnswer, QueueStore, Step
from dataq.store.remembered import Done, parse_done
from tests.helpers import make_records
from tests.push_support import LOOPBACK, Certs, LineClient, StartPush, reply_for

WORKER = "host:1:pop:abc"


async def done(store: QueueStore, count: int, start: int = 0) -> list[str]:
    """Push, claim and acknowledge ``count`` records: done at this site."""
    records = make_records(count, start)
    await store.push_batch(records, source="test")
    await store.heartbeat(WORKER, {}, {}, 10.0)
    claim = await store.claim(WORKER, count)
    assert await store.ack(WORKER, [(record.checksum, "") for record in claim.records]) == [True] * count
    return [record.checksum for record in records]


async def test_a_receipts_line_is_answered_one_line_per_id_in_order_with_the_records_around_it(
        store: QueueStore, push_daemon: StartPush) -> None:
    finished = await done(store, 2)
    daemon = await push_daemon()
    waiting, later, never = make_records(3, start=10)
    client = await LineClient.connect(daemon.port)
    try:
        await client.send(waiting, json.dumps({"receipts": [*finished, waiting.checksum, never.checksum]}), later)
        replies = await client.replies(6)
    finally:
        await client.close()
    assert replies[0] == reply_for(waiting) and replies[5] == reply_for(later)
    answers = [json.loads(line) for line in replies[1:5]]
    assert [(a["id"], a["receipt"]) for a in answers] == [
        (finished[0], "done"), (finished[1], "done"), (waiting.checksum, "pending"), (never.checksum, "unknown")]
    assert answers[2]["state"] == "queued", "a record pushed on the line before is answered for"
    assert all(answer["site"] == answer["from"] for answer in answers)
    assert answers[0]["at"] >= answers[0]["pushed"]


async def test_bad_receipts_lines_get_one_error_each_and_the_connection_goes_on(
        store: QueueStore, push_daemon: StartPush) -> None:
    daemon = await push_daemon()
    record = make_records(1)[0]
    client = await LineClient.connect(daemon.port)
    try:
        await client.send('{"receipts": "abc"}', '{"receipts": [1, "xyz", "' + "a" * 32 + '"]}',
                          '{"receipts": [], "extra": 1}', '{"receipts": [' + ",".join(['"' + "b" * 32 + '"'] *
                                                                                   (MAX_RECEIPT_IDS + 1)) + "]}",
                          '{"receipts": [', record)
        replies = await client.replies(8)
    finally:
        await client.close()
    assert replies[0].startswith("Error: receipts: 'receipts' must be a list")
    assert replies[1].startswith("Error: receipts: an id must be a string")
    assert replies[2].startswith("Error: receipts: ") and "xyz" in replies[2]
    assert json.loads(replies[3])["receipt"] == "unknown"
    assert replies[4].startswith("Error: receipts: unknown key 'extra'")
    assert replies[5].startswith(f"Error: receipts: {MAX_RECEIPT_IDS + 1} ids in one line")
    assert replies[6].startswith("Error: receipts: not a JSON object")
    assert replies[7] == reply_for(record)


async def test_custody_answers_pending_until_the_next_site_says_done_then_done_with_the_end_time(
        store: QueueStore, push_daemon: StartPush) -> None:
    (record_id,) = await done(store, 1)
    now = time.time()
    record = make_records(1)[0]
    await store.keep([CustodyEntry(record, "next:1", now)], first_ask=now)
    daemon = await push_daemon()
    (answer,) = await ask(LOOPBACK, daemon.port, [record_id], site="upstream", tls=None, within=5)
    assert (answer.kind, answer.state) == ("pending", "custody"), "done here is not done end to end"
    assert answer.extra["next"] == ["next:1"]
    (entry,) = await store.custody_due(10, now=now + 1)
    further = LastAnswer("pending", "far", "inactive", "disk full")
    assert await store.apply_steps([CustodyStep(Step.PENDING, entry, replacement=CustodyEntry(
        entry.record, entry.site, entry.handed_at, last=further), ask_at=now + 60)], 60) == [True]
    (answer,) = await ask(LOOPBACK, daemon.port, [record_id], site="upstream", tls=None, within=5)
    assert (answer.kind, answer.site, answer.state, answer.error) == ("pending", "far", "inactive", "disk full")
    entry = (await store.custody([record_id]))[record_id]
    end = now + 30
    assert await store.apply_steps([CustodyStep(Step.DONE, entry, end_at=end)], 60) == [True]
    (answer,) = await ask(LOOPBACK, daemon.port, [record_id], site="upstream", tls=None, within=5)
    assert (answer.kind, answer.at) == ("done", round(end, 3))
    summary = await store.summary()
    assert (summary.custody, summary.custody_sites, summary.counters["receipts"]) == (0, {}, 1)


async def test_a_step_decided_on_an_entry_kept_again_meanwhile_leaves_it_alone(store: QueueStore) -> None:
    record = make_records(1)[0]
    now = time.time()
    await store.keep([CustodyEntry(record, "a:1", now)], first_ask=now)
    (seen,) = await store.custody_due(10, now=now + 1)
    await store.keep([CustodyEntry(record, "b:2", now + 2)], first_ask=now + 2)  # handed on anew meanwhile
    assert await store.apply_steps([CustodyStep(Step.DONE, seen, end_at=now + 3)], 60) == [False]
    summary = await store.summary()
    assert (summary.custody, summary.custody_sites) == (1, {"b:2": 1})
    assert summary.custody_since is not None and abs(summary.custody_since - now) < 0.01, "the first hand-on counts"


async def test_resending_puts_the_record_back_in_the_queue_as_it_was_and_keeps_it_in_custody(
        store: QueueStore) -> None:
    (record_id,) = await done(store, 1)
    record = make_records(1)[0]
    now = time.time()
    await store.keep([CustodyEntry(record, "a:1", now)], first_ask=now)
    (entry,) = await store.custody_due(10, now=now + 1)
    replacement = CustodyEntry(entry.record, entry.site, entry.handed_at,
                               last=LastAnswer("unknown", "a", note="resent"), resends=1)
    assert await store.apply_steps([CustodyStep(Step.RESEND, entry, replacement=replacement)], 60,
                                   now=now + 1) == [True]
    claim = await store.claim(WORKER, 10)
    assert [(r.checksum, r.path, r.size) for r in claim.records] == [(record_id, record.path, record.size)]
    summary = await store.summary()
    assert (summary.custody, summary.counters["resent"]) == (1, 1)
    assert await store.custody_due(10, now=now + 30) == [], "asked again only once handed on anew"
    await store.keep([CustodyEntry(record, "b:2", now + 2)], first_ask=now + 2)
    assert (await store.custody([record_id]))[record_id].resends == 1


async def test_done_records_are_remembered_with_their_times(store: QueueStore) -> None:
    before = time.time()
    (record_id,) = await done(store, 1)
    (remembered,) = await store.whereabouts([record_id], max_errors=0)
    assert isinstance(remembered, Done) and remembered.end_at is None
    assert before - 1 <= remembered.pushed_at <= remembered.done_at <= time.time() + 1
    assert parse_done("1000,250,40").confirmed_at == 1.04


async def test_custody_metrics_show_records_per_site_the_oldest_resends_and_receipt_latency(
        store: QueueStore) -> None:
    records = make_records(3)
    now = time.time()
    await store.keep([CustodyEntry(records[0], "a:1", now - 100), CustodyEntry(records[1], "", now - 5)],
                     first_ask=now, now=now - 100)
    await store.keep([CustodyEntry(records[2], "a:1", now)], first_ask=now, now=now)
    entry = (await store.custody([records[2].checksum]))[records[2].checksum]
    await store.apply_steps([CustodyStep(Step.DONE, entry, end_at=(entry.record.pushed_at or now) + 2.5)], 60)
    summary = await store.summary()
    families = {family.name: family for family in custody_families("transfer", summary, now=now)}
    custody = {tuple(s.labels.values()): s.value for s in families[CUSTODY_RECORDS].samples}
    assert custody == {("transfer", ""): 1, ("transfer", "a:1"): 1}
    assert 99 <= families[CUSTODY_OLDEST].samples[0].value <= 101
    assert families[RESENT.removesuffix("_total")].samples[0].value == 0
    buckets = {s.labels["le"]: s.value for s in families[RECEIPT_LATENCY].samples if s.name.endswith("_bucket")}
    assert (buckets["1.0"], buckets["5.0"], buckets["+Inf"]) == (0, 1, 1)


async def test_receipts_travel_over_mutual_tls_as_hand_ons_do_and_a_rogue_client_gets_none(
        store: QueueStore, push_daemon: StartPush, certs: Certs) -> None:
    (record_id,) = await done(store, 1)
    daemon = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key, tls_ca=certs.ca)
    tls = client_tls_context(certs.ca, certs.client_cert, certs.client_key)
    (answer,) = await ask(LOOPBACK, daemon.port, [record_id], site="upstream", tls=tls, within=5)
    assert answer.kind == "done"
    rogue = client_tls_context(certs.ca, certs.rogue_cert, certs.rogue_key)
    with pytest.raises(DataqError):
        await ask(LOOPBACK, daemon.port, [record_id], site="upstream", tls=rogue, within=5)
