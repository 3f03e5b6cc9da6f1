"""The console an operator keeps open, in headless Chromium: each queue's state as it changes, a file found by
name, glob and id, its page with its journey across a two-site chain, and actions from that page.

The screenshots are kept for review in ``$DATAQ_CONSOLE_SCREENSHOTS`` (a directory; the test's own when unset):
the documentation's images of each view come from there (``make screenshots``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from dataq.embedded.redis_server import free_port
from dataq.feed.client import Feeder
from dataq.record import Record
from dataq.store import CustodyEntry, Flag, QueueStore
from testbed.cascade import Cascade
from testbed.waits import eventually
from tests.cascade_support import FAST, archived, feed, make_sources
from tests.helpers import checksum_of, make_records
from tests.pop_support import daemon_env
from tests.web.conftest import TOKEN, WORKER
from tests.web.test_browser import DATAQ, FAILING, browser, failing_suite, open_when_served, suite, wait

__all__ = ["browser", "suite"]  # the fixtures this module uses from the first browser test's

SCREENSHOTS_ENV = "DATAQ_CONSOLE_SCREENSHOTS"
VALLEY = "rsync://valley.example:873/incoming"


def shots(tmp_path: Path) -> Path:
    directory = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def snap(driver: WebDriver, directory: Path, name: str) -> None:
    path = directory / f"console-{name}.png"
    assert driver.save_screenshot(str(path)) and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def state_of(driver: WebDriver, queue: str) -> str:
    found: list[str] = []

    def read(d: WebDriver) -> bool:
        found[:] = [d.find_element(
            By.CSS_SELECTOR, f'tr[data-queue="{queue}"]:not([data-activity]) [data-field="state"] .state').text]
        return True

    wait(driver, read, f"{queue}'s state")
    return found[0]


def search(driver: WebDriver, text: str) -> list[tuple[str, str]]:
    """Type ``text`` into the search box, reached with ``/`` as an operator would; (path, where) per hit."""
    driver.find_element(By.TAG_NAME, "body").send_keys("/")
    box = driver.switch_to.active_element
    assert box.get_attribute("id") == "search", "'/' puts the cursor in the search box"
    box.clear()
    box.send_keys(text, Keys.ENTER)
    found: list[tuple[str, str]] = []

    def answered(driver: WebDriver) -> bool:
        # This search's page (a page of an earlier search has its hits too), read whole before it is replaced.
        if parse_qs(urlparse(driver.current_url).query).get("q") != [text]:
            return False
        try:
            rows = driver.find_elements(By.CSS_SELECTOR, "#hits tr[data-record]")
            found[:] = [(row.find_elements(By.TAG_NAME, "td")[2].text, row.find_elements(By.TAG_NAME, "td")[1].text)
                        for row in rows]
            return bool(driver.find_elements(By.ID, "hits"))
        except StaleElementReferenceException:
            return False

    wait(driver, answered, f"the search for {text}")
    return found


def log_in(driver: WebDriver, url: str) -> None:
    driver.get(url + "/login")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.ID, "login").click()
    wait(driver, lambda d: d.current_url == url + "/", "the login")


@pytest.mark.timeout(180)
def test_an_operator_sees_the_state_change_finds_a_failed_file_by_name_and_redoes_it_from_its_page(
        browser: WebDriver, suite: tuple[str, int, Path], tmp_path: Path) -> None:
    url, push_port, _ = suite
    directory = shots(tmp_path)
    open_when_served(browser, url + "/")
    assert state_of(browser, "transfer") == "healthy"
    assert "state-ok" in browser.find_element(By.CSS_SELECTOR, '[data-field="state"] .state').get_attribute("class")

    result = asyncio.run(Feeder("127.0.0.1", push_port, window=10, retry_for=30).feed(make_records(FAILING)))
    assert result.pushed == FAILING
    wait(browser, lambda d: state_of(d, "transfer") == "inactive records", "the state to follow without a reload")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="transfer"]')
    assert row.get_attribute("class") == "severity-ticket"
    assert f"{FAILING} inactive records wait for an operator" in row.text
    snap(browser, directory, "overview")

    hits = search(browser, "*_ori.hdr")
    assert len(hits) == FAILING and {where for _, where in hits} == {"inactive"}
    snap(browser, directory, "search")
    assert search(browser, "c15e_140708_000001_ori.hdr") == [(make_records(2)[1].path, "inactive")]
    assert search(browser, checksum_of(2)) == [(make_records(3)[2].path, "inactive")]

    log_in(browser, url)
    search(browser, "c15e_140708_000001_ori.hdr")
    browser.find_element(By.CSS_SELECTOR, "#hits a").click()
    wait(browser, lambda d: d.find_elements(By.ID, "why"), "the record's page")
    assert browser.find_element(By.ID, "why").get_attribute("data-code") == "inactive"
    assert "rsync: connection refused by valley.example" in browser.find_element(By.TAG_NAME, "main").text
    snap(browser, directory, "record")
    browser.find_element(By.ID, "op-retry").click()
    wait(browser, lambda d: "retry: 1 moved" in d.find_element(By.ID, "message").text, "the redo's outcome")

    browser.get(url + "/queues/transfer")
    browser.find_element(By.ID, "op-action-off").click()
    wait(browser, lambda d: "action: off" in d.find_element(By.ID, "message").text, "the pause")
    browser.get(url + "/")
    # The redone record failed again: the worse condition stays the state, and the pause is listed after it.
    wait(browser, lambda d: "the action flag is off" in d.find_element(
        By.CSS_SELECTOR, 'tr[data-queue="transfer"] [data-field="conditions"]').text, "the pause among the conditions")
    assert state_of(browser, "transfer") == "inactive records"


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[tuple[Cascade, str]]:
    """Mountain -> archive, with the mountain's console (``dataq web``) beside its daemons: (chain, console URL)."""
    cascade = Cascade(tmp_path, ["mountain", "archive"], move=FAST, pop={"concurrency": 4})
    cascade.start()
    port = free_port()
    with cascade.first.config.open("a", encoding="utf-8") as config:
        config.write(f'\n[web]\nport = {port}\ntoken = "{TOKEN}"\n')
    web = subprocess.Popen([*DATAQ, "web", "--config", str(cascade.first.config)],
                           env={**daemon_env(), "HOME": str(tmp_path)}, stderr=subprocess.DEVNULL)
    try:
        yield cascade, f"http://127.0.0.1:{port}"
    finally:
        web.terminate()
        web.wait(timeout=30)
        cascade.stop()


@pytest.mark.timeout(240)
def test_a_file_is_followed_across_a_two_site_chain_and_a_site_down_turns_the_queue_red(
        browser: WebDriver, chain: tuple[Cascade, str], tmp_path: Path) -> None:
    cascade, url = chain
    directory = shots(tmp_path)
    records = make_sources(tmp_path / "night", 4)
    assert len(asyncio.run(feed(cascade.first, records))) == 4

    async def at_the_archive() -> bool:
        return {record.checksum for record in records} <= archived(cascade.last)

    asyncio.run(eventually(at_the_archive, timeout=120, what="every file at the archive"))
    open_when_served(browser, url + "/")
    wanted = f"{records[2].path}"

    def done_end_to_end(driver: WebDriver) -> bool:
        hits = search(driver, "c4d_0000[0-3].fits")
        return len(hits) == 4 and all(where in ("done", "handed on") for _, where in hits)

    wait(browser, done_end_to_end, "the files found, done or handed on")
    ((path, where),) = search(browser, wanted)
    assert path == wanted and where in ("done", "handed on")
    browser.find_element(By.CSS_SELECTOR, "#hits a").click()

    def journey(driver: WebDriver) -> list[tuple[str, str]]:
        driver.refresh()
        return [(row.find_elements(By.TAG_NAME, "td")[0].text, row.find_elements(By.TAG_NAME, "td")[1].text)
                for row in driver.find_elements(By.CSS_SELECTOR, "#journey tbody tr")]

    wait(browser, lambda d: journey(d) == [("mountain", "done"), ("archive", "done")],
         "the journey: done at the mountain and at the archive")
    snap(browser, directory, "journey")

    cascade.last.down()
    more = make_sources(tmp_path / "later", 2, prefix="late")
    asyncio.run(feed(cascade.first, more))
    browser.get(url + "/")
    wait(browser, lambda d: state_of(d, "transfer") == "destination unreachable", "the red state", )
    assert browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="transfer"]').get_attribute("class") == \
        "severity-page"
    snap(browser, directory, "unreachable")


@pytest.fixture
def watching_site(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """``dataq run`` with a watched directory (its feeder started by the suite, its metrics on a free port) and a
    queue whose action fails: (console URL, the watched directory, the settings file)."""
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    feed = ("[feed]", f'directories = ["{incoming}"]', f"metrics_port = {free_port()}", "settle = 0.2")
    with failing_suite(tmp_path, "disk full at the archive", *feed) as (url, _, config):
        yield url, incoming, config


@pytest.mark.timeout(180)
def test_an_audits_findings_are_repaired_from_the_queue_page_and_the_feeders_page_shows_the_spool(
        browser: WebDriver, watching_site: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, incoming, config = watching_site
    directory = shots(tmp_path)
    open_when_served(browser, url + "/")
    (incoming / "obs_0001.fits").write_bytes(b"photons")
    browser.get(url + "/feeders")

    def fed(driver: WebDriver) -> bool:
        driver.refresh()
        cells = driver.find_elements(By.CSS_SELECTOR, '#feeders [data-field="connected"]')
        return bool(cells) and cells[0].text == "yes" and "ago" in driver.find_element(By.ID, "feeders").text

    wait(browser, fed, "the feeder connected, its file acknowledged")
    snap(browser, directory, "feeders")

    night = tmp_path / "night"  # written while no feeder watched it, a while ago (settled: the audit looks at them)
    for record in make_sources(night, 2):
        os.utime(record.path, (time.time() - 60, time.time() - 60))
    audit = subprocess.run([*DATAQ, "audit", "--config", str(config), "--queue", "transfer", str(night)],
                           env={**daemon_env(), "HOME": str(tmp_path)}, capture_output=True, timeout=60, check=False)
    assert audit.returncode == 1, audit.stderr.decode()
    log_in(browser, url)
    browser.get(url + "/queues/transfer")
    section = browser.find_element(By.ID, "audits")
    assert "2 never fed" in section.text and str(night / "c4d_00000.fits") in section.text
    browser.find_element(By.ID, "repair-1").click()
    wait(browser, lambda d: f"repair of dir:{night}: started" in d.find_element(By.ID, "message").text,
         "the repair to start")

    def repaired(driver: WebDriver) -> bool:
        driver.get(url + "/queues/transfer")
        return "ended with status 1" in driver.find_element(By.ID, "audits").text

    wait(browser, repaired, "the repair's outcome")
    assert "2 repaired" in browser.find_element(By.ID, "audits").text
    snap(browser, directory, "audit")


SCENARIOS = ("steady", "nobody", "failing", "cut_off", "night_only", "unconfirmed", "audited", "paused")
"""One queue per scenario, each set up so that it shows the state its name suggests."""


async def set_up_scenarios(redis_url: str) -> None:
    now = time.time()
    stores = {name: QueueStore.from_url(redis_url, name) for name in SCENARIOS}
    try:
        for name, store in stores.items():
            records = [Record(f"/data/{name}/obs_{n:04d}.fits", checksum_of(n + 100 * SCENARIOS.index(name)), 100)
                       for n in range(3)]
            if name in ("nobody", "failing", "cut_off", "paused"):  # records waiting: the others would be stalled
                await store.push_batch(records, "test")
            if name in ("failing", "cut_off", "night_only"):
                beat: dict[str, object] = {}
                if name == "cut_off":
                    beat["unreachable"] = [{"destination": VALLEY, "since": now - 600, "error": "connection refused"}]
                if name == "night_only":
                    beat["outside_window"] = [{"destination": VALLEY, "windows": "19:00-07:00", "opens": now + 3600}]
                await store.heartbeat(WORKER, {"role": "pop", "host": "host-1", "pid": 1}, beat, ttl=600)
            if name == "failing":
                claim = await store.claim(WORKER, 3)
                await store.fail(WORKER, [(r.id, "disk full") for r in claim.records], max_errors=0)
            if name == "unconfirmed":
                await store.keep([CustodyEntry(records[0], "valley:9988", now - 30)], first_ask=now, now=now - 30)
            if name == "audited":
                await store.save_audit("dir:/data/audited", {"at": now, "counts": {"arrived": 9, "never_fed": 2}})
            if name == "paused":
                await store.set_flag(Flag.ACTION, False)
    finally:
        for store in stores.values():
            await store.close()


@pytest.fixture
def scenarios(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """``dataq web`` over queues in every state a test can bring about in seconds (thresholds of a second)."""
    asyncio.run(set_up_scenarios(redis_url))
    port = free_port()
    config = tmp_path / "dataq.toml"
    config.write_text("\n".join([
        f'data_dir = "{tmp_path / "data"}"', "[redis]", f'url = "{redis_url}"', "[metrics]", "enabled = false",
        "[web]", f"port = {port}", "[health]", "backlog_old = 1.0", "stalled_after = 1.0", "receipts_overdue = 1.0",
        *(f"[queues.{name}]\npush_port = {free_port()}" for name in SCENARIOS)]) + "\n")
    web = subprocess.Popen([*DATAQ, "web", "--config", str(config)], env={**daemon_env(), "HOME": str(tmp_path)},
                           stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        web.terminate()
        web.wait(timeout=30)


@pytest.mark.timeout(120)
def test_each_state_is_shown_in_words_and_colour_for_the_scenario_that_causes_it(
        browser: WebDriver, scenarios: str, tmp_path: Path) -> None:
    time.sleep(1.1)  # the thresholds' second: the unattended backlogs are now late and stalled
    open_when_served(browser, scenarios + "/")
    expected = {"steady": ("healthy", "ok"), "nobody": ("stalled", "page"),
                "failing": ("inactive records", "ticket"), "cut_off": ("destination unreachable", "page"),
                "night_only": ("outside window", "info"), "unconfirmed": ("receipts overdue", "ticket"),
                "audited": ("audit found files", "ticket"), "paused": ("paused", "info")}

    def shown(driver: WebDriver) -> dict[str, tuple[str, str]]:
        found = {}
        for name in SCENARIOS:
            try:
                badge = driver.find_element(
                    By.CSS_SELECTOR, f'tr[data-queue="{name}"]:not([data-activity]) [data-field="state"] .state')
                found[name] = (badge.text, (badge.get_attribute("class") or "").split("state-")[-1])
            except StaleElementReferenceException:  # redrawn by the live refresh meanwhile: look again
                return {}
        return found

    wait(browser, lambda d: shown(d) == expected, "every queue's state")
    nobody = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="nobody"]').text
    assert "none done for 1 s" in nobody and "the next record to run has waited" in nobody
    snap(browser, shots(tmp_path), "states")


async def push_old(redis_url: str, queue: str, count: int, age: float) -> None:
    """``count`` records in ``queue``, pushed ``age`` seconds ago."""
    store = QueueStore.from_url(redis_url, queue)
    try:
        records = [Record(f"/data/{queue}/obs_{n:04d}.fits", checksum_of(900 + n), 10) for n in range(count)]
        await store.push_batch(records, "test", now=time.time() - age)
    finally:
        await store.close()


def console_over(tmp_path: Path, name: str, redis: list[str], health: tuple[str, ...] = ()
                 ) -> tuple[subprocess.Popen[bytes], str]:
    """``dataq web`` for queue ``name`` with these ``[redis]`` and ``[health]`` lines: (its process, its URL)."""
    port = free_port()
    config = tmp_path / f"{name}.toml"
    config.write_text("\n".join([
        f'data_dir = "{tmp_path / name}"', "[redis]", *redis, "socket_timeout = 1.0", "[metrics]", "enabled = false",
        "[web]", f"port = {port}", "[health]", *health, f"[queues.{name}]"]) + "\n")
    process = subprocess.Popen([*DATAQ, "web", "--config", str(config)], env={**daemon_env(), "HOME": str(tmp_path)},
                               stderr=subprocess.DEVNULL)
    return process, f"http://127.0.0.1:{port}"


@pytest.mark.timeout(120)
def test_redis_out_of_reach_a_master_without_its_replicas_and_a_late_or_growing_backlog_are_shown(
        browser: WebDriver, redis_url: str, tmp_path: Path) -> None:
    # The test's Redis has no replica: a site that wants one is degraded; one whose Redis is gone is down.
    degraded, degraded_url = console_over(tmp_path, "degraded", [f'url = "{redis_url}"', "min_replicas = 1"],
                                          ("stalled_after = 3600.0",))
    down, down_url = console_over(tmp_path, "down", [f'url = "redis://127.0.0.1:{free_port()}"'])
    # A backlog old but not stalled (the stall's threshold out of reach), and one growing (an hour's counts: a
    # new queue's ring has counted all of it).
    asyncio.run(push_old(redis_url, "late", 3, 30.0))
    asyncio.run(push_old(redis_url, "growing", 12, 0.0))
    late, late_url = console_over(tmp_path, "late", [f'url = "{redis_url}"'],
                                  ("backlog_old = 5.0", "stalled_after = 3600.0"))
    growing, growing_url = console_over(tmp_path, "growing", [f'url = "{redis_url}"'],
                                        ("growing_per_hour = 10.0", "growing_above = 10"))
    try:
        for url, queue, words, severity in ((degraded_url, "degraded", "replication degraded", "ticket"),
                                            (down_url, "down", "redis down", "page"),
                                            (late_url, "late", "backlog old", "page"),
                                            (growing_url, "growing", "backlog growing", "ticket")):
            open_when_served(browser, url + "/")
            wait(browser, lambda d, q=queue, w=words: state_of(d, q) == w, words)
            badge = browser.find_element(By.CSS_SELECTOR, '[data-field="state"] .state')
            assert f"state-{severity}" in (badge.get_attribute("class") or "")
            if queue == "down":
                assert "Redis is unavailable" in browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="down"]').text
            if queue == "growing":
                assert "the backlog grows by 12 records an hour" in browser.find_element(
                    By.CSS_SELECTOR, 'tr[data-queue="growing"]').text
    finally:
        for process in (degraded, down, late, growing):
            process.terminate()
            process.wait(timeout=30)
