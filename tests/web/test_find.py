"""Finding a file from the console: by id, file name, glob or path, in every queue, with where it stands; its page,
and what an operator may do from there."""

from __future__ import annotations

import re
from urllib.parse import parse_qs

from dataq.record import Record
from dataq.store import QueueList
from tests.helpers import checksum_of
from tests.web.conftest import WORKER, Web
from tests.web.test_api import BEARER, fail_once, get, post
from tests.web.test_pages import log_in, page

NIGHT = "/data/2026-11-28"


def observation(n: int) -> Record:
    return Record(path=f"{NIGHT}/obs_{n:04d}.fits", checksum=checksum_of(n), size=2000 + n)


async def finish(web: Web, count: int) -> None:
    """Claim and finish ``count`` records of the transfer queue (done, and remembered done)."""
    await web.transfer.heartbeat(WORKER, {"role": "pop", "host": "host-1", "pid": 4242}, {}, ttl=30)
    claim = await web.transfer.claim(WORKER, count)
    assert len(claim.records) == count
    await web.transfer.ack(WORKER, [(record.id, "test") for record in claim.records])


async def test_a_file_is_found_by_name_glob_path_or_id_with_where_it_stands(web: Web) -> None:
    await web.transfer.push_batch([observation(n) for n in range(4)], "test")
    await finish(web, 1)  # obs_0000: claimed first (the oldest), done
    hits = await get(web, "/api/search?q=obs_0002.fits")
    assert hits == [{"queue": "transfer", "id": checksum_of(2), "path": f"{NIGHT}/obs_0002.fits", "size": 2002,
                     "place": "queued", "by": "name"}]
    by_glob = await get(web, "/api/search?q=obs_000*.fits")
    assert {(hit["path"].rsplit("/", 1)[1], hit["place"]) for hit in by_glob} == {
        ("obs_0000.fits", "done"), ("obs_0001.fits", "queued"), ("obs_0002.fits", "queued"),
        ("obs_0003.fits", "queued")}
    assert len(await get(web, f"/api/search?q={NIGHT}/*")) == 4
    (by_id,) = await get(web, f"/api/search?q={checksum_of(3)}")
    assert (by_id["by"], by_id["path"], by_id["place"]) == ("id", f"{NIGHT}/obs_0003.fits", "queued")
    (done,) = await get(web, f"/api/search?q={checksum_of(0)}")
    assert (done["path"], done["size"], done["place"]) == (f"{NIGHT}/obs_0000.fits", 2000, "done"), \
        "a record no longer tracked: its path from the names index"
    assert await get(web, "/api/search?q=nothing-like-it.fits") == []


async def test_a_search_without_words_or_with_control_characters_is_a_clear_error(web: Web) -> None:
    response = await web.client.get("/api/search?q=%20")
    assert response.status == 400 and "type an id, a file name" in (await response.json())["error"]
    response = await web.client.get("/api/search?q=a%01b")
    assert response.status == 400 and "control characters" in (await response.json())["error"]


async def test_the_search_page_lists_the_files_found_each_linking_to_its_page(web: Web) -> None:
    await web.transfer.push_batch([observation(n) for n in range(3)], "test")
    html = await page(web, "/search?q=obs_*.fits")
    assert html.count("<tr data-record=") == 3
    assert f'href="/records/{checksum_of(1)}?queue=transfer&amp;name=obs_0001.fits"' in html
    assert 'id="search"' in html and 'value="obs_*.fits"' in html
    assert 'id="no-hits"' in await page(web, "/search?q=none_*.fits")


async def test_an_inactive_record_found_by_name_is_redone_from_its_page(web: Web) -> None:
    (record_id,) = await fail_once(web.transfer, 1, "rsync: connection refused")
    csrf = await log_in(web)
    html = await page(web, f"/records/{record_id}?queue=transfer")
    assert 'id="op-retry"' in html and "rsync: connection refused" in html
    response = await web.client.post("/queues/transfer/do", allow_redirects=False, data={
        "csrf": csrf, "op": "retry", "id": record_id, "back": f"/records/{record_id}"})
    assert response.status == 303
    location = response.headers["Location"]
    assert location.startswith(f"/records/{record_id}?") and parse_qs(location.split("?")[1]) == {
        "queue": ["transfer"], "done": ["retry: 1 moved"]}
    assert (await web.transfer.summary()).active == 1
    redone = await page(web, location)
    assert 'id="message">retry: 1 moved' in redone and 'data-code="queued"' in redone


async def test_a_done_record_is_sent_again_from_its_page_with_the_path_its_name_was_found_under(web: Web) -> None:
    await web.transfer.push_batch([observation(7)], "test")
    await finish(web, 1)
    assert (await get(web, "/api/search?q=obs_0007.fits"))[0]["place"] == "done"
    csrf = await log_in(web)
    html = await page(web, f"/records/{checksum_of(7)}?queue=transfer&name=obs_0007.fits")
    assert 'data-code="done"' in html and f'<td id="path">{NIGHT}/obs_0007.fits</td>' in html
    form = re.search(r'<form[^>]*>(?:(?!</form>).)*id="op-again"', html, re.S)
    assert form is not None and 'name="size" value="2007"' in form[0]
    response = await web.client.post("/queues/transfer/do", allow_redirects=False, data={
        "csrf": csrf, "op": "again", "id": checksum_of(7), "path": f"{NIGHT}/obs_0007.fits", "size": "2007",
        "back": f"/records/{checksum_of(7)}"})
    assert response.status == 303 and parse_qs(response.headers["Location"].split("?")[1])["done"] == [
        "again: 1 moved"]
    (record,) = await web.transfer.list_records(QueueList.ACTIVE)
    assert (record.path, record.size) == (f"{NIGHT}/obs_0007.fits", 2007)


async def test_sending_again_a_malformed_record_is_refused_with_the_reason(web: Web) -> None:
    result = await post(web, "/api/queues/transfer/again", {"id": "not-a-checksum", "path": "/d/x.fits",
                                                            "size": "12"}, status=400, headers=BEARER)
    assert "not a record to send again" in result["error"] and "checksum" in result["error"]
    odd = await post(web, "/api/queues/transfer/again", {"id": checksum_of(1), "path": "/d/x.fits", "size": "²"},
                     status=400, headers=BEARER)
    assert "not a record to send again" in odd["error"]
    assert (await web.transfer.summary()).active == 0
