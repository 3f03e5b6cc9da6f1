"""The console's pages: what an operator sees, the login, and forms that a cross-site request cannot forge."""

from __future__ import annotations

import re
import time
from dataclasses import replace

from aiohttp.test_utils import TestClient, TestServer

from dataq.activities import Activity, Plan
from dataq.config import load_settings
from dataq.ops.daemon_ops import note_ages
from dataq.store import CustodyEntry, Flag, LastAnswer, QueueList, QueueStore
from dataq.web.console import Console
from dataq.web.plot import not_done, waited
from dataq.web.server import make_app
from tests.helpers import make_records
from tests.web.conftest import TOKEN, WORKER, Web
from tests.web.test_api import fail_once


async def page(web: Web, path: str, status: int = 200) -> str:
    response = await web.client.get(path)
    assert response.status == status, await response.text()
    return await response.text()


async def log_in(web: Web) -> str:
    """Log in with the token; the CSRF value the pages then carry."""
    response = await web.client.post("/login", data={"token": TOKEN}, allow_redirects=False)
    assert response.status == 303 and response.headers["Location"] == "/"
    cookie = response.cookies["dataq_session"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and TOKEN not in cookie.value
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', await page(web, "/queues/transfer"))
    assert found is not None
    return found[1]


async def test_the_overview_shows_every_queue_with_its_counts_flags_and_a_rate_plot(web: Web) -> None:
    await web.transfer.push_batch(make_records(7), "test")
    await web.stores["ingest"].set_flag(Flag.READ, False)
    html = await page(web, "/")
    row = html[html.index('data-queue="transfer"'):html.index('data-queue="ingest"')]
    assert '<span data-field="active">7</span>' in row and '<span data-field="action" class="flag">on</span>' in row
    ingest = html[html.index('data-queue="ingest"'):]
    assert '<span data-field="read" class="flag">off</span>' in ingest
    for queue in ("transfer", "ingest"):
        for view in ("files", "bytes", "backlog"):
            assert f'src="/queues/{queue}/plot.svg?view={view}&amp;span=hour"' in html
    assert "operator login" in html and "https://" not in html  # nothing fetched from elsewhere


async def test_bytes_done_and_records_not_done_are_plotted_over_the_hour_or_the_day(web: Web) -> None:
    records = make_records(30)
    await web.transfer.push_batch(records, "test")
    await web.transfer.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
    claim = await web.transfer.claim(WORKER, 10)
    await web.transfer.ack(WORKER, [(record.id, "ok") for record in claim.records])
    # About 100 kB done: 10 kB/s in a 10-second bucket, 330 B/s in a 5-minute one.
    for span, points, unit in (("hour", 360, "kB/s"), ("day", 288, "B/s")):
        svg = await page(web, f"/queues/transfer/plot.svg?view=bytes&span={span}")
        assert svg.startswith("<svg") and f"over the last {span}" in svg
        line = re.search(rf'class="series-done {unit}"[^>]* points="([^"]+)"', svg)
        assert line is not None and len(line[1].split()) == points
        backlog = await page(web, f"/queues/transfer/plot.svg?view=backlog&span={span}")
        levels = re.search(r'class="series-not done"[^>]* points="([^"]+)"', backlog)
        assert levels is not None and len(levels[1].split()) == points
    history = await (await web.client.get("/api/queues/transfer/rates?span=day")).json()
    assert history["bucket_seconds"] == 300 and history["tracked"] == 20
    assert sum(bucket["done_bytes"] for bucket in history["buckets"]) == sum(r.size for r in claim.records)
    assert "span must be one of hour, day" in await page(web, "/queues/transfer/plot.svg?span=week", 400)
    assert "view must be one of files, bytes, backlog" in await page(web, "/queues/transfer/plot.svg?view=x", 400)


async def test_how_long_the_next_record_waited_is_plotted_from_the_pop_daemons_notes(web: Web) -> None:
    await web.transfer.note_backlog_age(600)
    svg = await page(web, "/queues/transfer/plot.svg?view=age&span=hour")
    assert "how long the next record had waited over the last hour" in svg and "10.0 min" in svg
    assert 'src="/queues/transfer/plot.svg?view=age&amp;span=hour"' in await page(web, "/")


def test_a_bucket_without_a_note_shows_the_note_before_it() -> None:
    assert waited([{"backlog_age": None}, {"backlog_age": 30}, {}, {"backlog_age": 5}]) == [0.0, 30.0, 30.0, 5.0]


def test_records_not_done_are_counted_back_from_now() -> None:
    buckets = [{"pushed": 10, "done": 0}, {"pushed": 0, "done": 4}, {"pushed": 5, "done": 5}]
    assert not_done(buckets, 6) == [10.0, 6.0, 6.0]


async def test_the_rate_plot_is_an_svg_of_the_last_hour(web: Web) -> None:
    await web.transfer.push_batch(make_records(30), "test")
    response = await web.client.get("/queues/transfer/rates.svg")
    assert response.content_type == "image/svg+xml"
    svg = await response.text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 3
    pushed = re.search(r'class="series-pushed"[^>]* points="([^"]+)"', svg)
    assert pushed is not None and len(pushed[1].split()) == 360


async def test_the_queue_page_shows_workers_inactive_records_with_their_last_error_and_events(web: Web) -> None:
    ids = await fail_once(web.transfer, 2, "rsync: No route to host")
    html = await page(web, "/queues/transfer")
    assert "rsync: No route to host" in html and all(record_id in html for record_id in ids)
    assert "host-1:4242:pop:abc123" in html and "deactivated" in html
    assert "Log in</a> with the operator token" in html and 'name="op"' not in html  # no forms before login


async def test_the_record_page_says_where_the_record_is_and_why_it_failed(web: Web) -> None:
    (record_id,) = await fail_once(web.transfer, 1, "disk full")
    html = await page(web, f"/records/{record_id}")
    assert '<td id="where">inactive</td>' in html and "disk full" in html
    # The reason and its code, as dataq-cli --why gives them.
    assert '<td id="why" data-code="inactive"><code>inactive</code> after 1 failures: disk full; to run it again: ' \
           f"dataq-cli --activate {record_id} {record_id}" in html
    assert "no queue tracks record" in await page(web, "/records/" + "f" * 32, 404)


async def test_a_wrong_token_does_not_log_in(web: Web) -> None:
    response = await web.client.post("/login", data={"token": "not-the-token-at-all"}, allow_redirects=False)
    assert response.status == 401 and "That is not the operator token" in await response.text()
    assert "dataq_session" not in response.cookies


async def test_a_logged_in_operator_acts_through_the_forms(web: Web) -> None:
    ids = await fail_once(web.transfer, 2, "boom")
    csrf = await log_in(web)
    response = await web.client.post("/queues/transfer/do", data={"csrf": csrf, "op": "action-off"},
                                     allow_redirects=False)
    assert response.status == 303 and response.headers["Location"].startswith("/queues/transfer?done=action")
    assert (await web.transfer.summary()).action is False
    await web.client.post("/queues/transfer/do", data={"csrf": csrf, "op": "retry", "id": ids[0]})
    assert (await web.transfer.summary()).inactive == 1
    html = await page(web, "/queues/transfer")
    assert 'value="action-on"' in html and 'value="retry"' in html


async def test_a_form_without_the_sessions_csrf_value_is_refused_even_with_the_cookie(web: Web) -> None:
    await fail_once(web.transfer, 1, "boom")
    await log_in(web)
    for data in ({"op": "redo"}, {"op": "redo", "csrf": "0" * 64}):
        response = await web.client.post("/queues/transfer/do", data=data, allow_redirects=False)
        assert response.status == 401
    # The API with the cookie alone (what a cross-site fetch would carry) is refused too.
    response = await web.client.post("/api/queues/transfer/redo")
    assert response.status == 401
    assert (await web.transfer.summary()).inactive == 1


async def test_without_login_a_form_is_refused(web: Web) -> None:
    await web.transfer.push_batch(make_records(1), "test")
    response = await web.client.post("/queues/transfer/do", data={"op": "action-off", "csrf": "x"})
    assert response.status == 401 and "operator token is needed" in await response.text()
    assert (await web.transfer.summary()).action is True


async def test_logging_out_ends_the_session(web: Web) -> None:
    csrf = await log_in(web)
    await web.client.post("/logout")
    response = await web.client.post("/queues/transfer/do", data={"csrf": csrf, "op": "read-off"})
    assert response.status == 401 and (await web.transfer.summary()).read is True


async def test_a_read_only_console_has_no_login(read_only: Web) -> None:
    assert "read-only console" in await page(read_only, "/")
    assert "no operator token is configured" in await page(read_only, "/login")
    response = await read_only.client.post("/login", data={"token": ""}, allow_redirects=False)
    assert response.status == 401


async def test_pages_refuse_framing_and_scripts_from_elsewhere_and_ship_their_own(web: Web) -> None:
    response = await web.client.get("/")
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]
    script = await web.client.get("/static/console.js")
    assert script.status == 200 and "setInterval(refresh" in await script.text()
    assert (await web.client.get("/static/../server.py")).status == 404


async def test_bad_paging_is_a_clear_error(web: Web) -> None:
    assert "offset must be 0 or more" in await page(web, "/queues/transfer?inactive_offset=-5", 400)
    assert "no queue 'nosuch'" in await page(web, "/queues/nosuch", 404)
    assert await web.transfer.list_records(QueueList.ACTIVE) == []


async def test_long_lists_are_paged(web: Web) -> None:
    await web.transfer.push_batch(make_records(120), "test")
    first = await page(web, "/queues/transfer")
    assert 'href="?active_offset=50">older</a>' in first and "newer</a>" not in first
    second = await page(web, "/queues/transfer?active_offset=100")
    assert 'href="?active_offset=50">newer</a>' in second and "older</a>" not in second
    assert second.count("/records/") == 20


async def test_the_queue_page_shows_the_chain_of_sites_with_the_records_waiting_at_each_hop_and_its_lag(
        web: Web) -> None:
    records = make_records(3)
    now = time.time()
    further = LastAnswer("pending", "archive", "queued")
    await web.transfer.keep([CustodyEntry(records[0], "valley:9988", now - 300, last=further)], first_ask=now,
                            now=now - 300)
    await web.transfer.keep([CustodyEntry(records[1], "valley:9988", now - 60)], first_ask=now, now=now - 60)
    await web.transfer.push_batch(make_records(2, start=10), "test")
    html = await page(web, "/queues/transfer")
    chain = html[html.index('id="chain"'):]
    rows = re.findall(r'<tr data-site="([^"]+)"><td>[^<]*</td><td>(\d+)</td><td>([^<]+)</td>', chain)
    assert [(site, int(waiting)) for site, waiting, _ in rows][1:] == [("archive", 1), ("valley:9988", 1)]
    assert int(rows[0][1]) == 2, "this site first, with the records still in its queue"
    lags = {site: lag for site, _, lag in rows}
    assert lags["archive"].endswith(" s") and 295 <= float(lags["archive"][:-2]) <= 310
    api = await (await web.client.get("/api/queues/transfer")).json()
    assert api["custody"]["records"] == 2
    assert [hop["site"] for hop in api["chain"]][1:] == ["archive", "valley:9988"]


async def test_the_queue_page_shows_each_activity_with_its_backlog_done_records_and_time_to_go(
        redis_url: str) -> None:
    plan = Plan((Activity("express", 0), Activity("default"), Activity("backfill", 1)))
    store = QueueStore.from_url(redis_url, "transfer", plan=plan)
    client = TestClient(TestServer(make_app(Console(load_settings(environ={}), {"transfer": store}), TOKEN)))
    await client.start_server()
    try:
        records = make_records(5)
        await store.push_batch([replace(r, activity="backfill") for r in records[:3]] + records[3:], "test")
        response = await client.get("/queues/transfer")
        html = await response.text()
        activities = html[html.index('id="activities"'):html.index("</section>", html.index('id="activities"'))]
        assert '<tr data-activity="express"><td>express</td><td>0</td><td>0</td>' in activities
        assert '<tr data-activity="backfill"><td>backfill</td><td>3</td><td>0</td><td>0.0</td>' in activities
        assert "no pop daemon of the queue is running" in activities
        assert 'src="/queues/transfer/plot.svg?view=files&amp;span=hour&amp;activity=backfill"' in activities
        svg = await (await client.get("/queues/transfer/plot.svg?view=files&span=day&activity=backfill")).text()
        assert svg.startswith("<svg") and "over the last day" in svg
        missing = await client.get("/queues/transfer/plot.svg?activity=nosuch")
        assert missing.status == 404 and "no activity 'nosuch'" in await missing.text()
        api = await (await client.get("/api/queues/transfer")).json()
        assert [(a["name"], a["active"]) for a in api["activities"]] == [("express", 0), ("default", 2),
                                                                       ("backfill", 3)]
        await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
        claim = await store.claim(WORKER, 5)
        finished = [record for record in claim.records if record.activity == "backfill"][:2]
        await store.ack(WORKER, [(record.id, "ok") for record in finished])
        await note_ages(store, time.time() + 60)
        backfill = await (await client.get("/api/queues/transfer/rates?activity=backfill")).json()
        assert sum(bucket["pushed"] for bucket in backfill["buckets"]) == 3, "pushed per activity"
        assert sum(bucket["done_bytes"] for bucket in backfill["buckets"]) == sum(r.size for r in finished)
        assert backfill["buckets"][-1]["backlog_age"] == 0, "nothing of backfill left queued"
        assert backfill["tracked"] == 0, "an activity's level is its records queued"
        late = replace(make_records(1, start=50)[0], activity="backfill")
        now = time.time()
        await store.push_batch([late], "test", now=now - 100)
        await note_ages(store, now)
        backfill = await (await client.get("/api/queues/transfer/rates?activity=backfill")).json()
        assert backfill["buckets"][-1]["backlog_age"] == 100 and backfill["tracked"] == 1
        by_name = {a["name"]: a for a in (await (await client.get("/api/queues/transfer")).json())["activities"]}
        assert by_name["backfill"]["backlog_age_seconds"] >= 100 and by_name["express"]["backlog_age_seconds"] is None
        assert by_name["backfill"]["state"]["condition"] == "healthy", "100 s is not late by the default hour"
    finally:
        await client.close()
        await store.close()
