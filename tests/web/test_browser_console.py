"""The console an operator keeps open, in headless Chromium: each queue's state as it changes, a file found by
name, glob and id, its page with its journey across a two-site chain, and actions from that page.

The screenshots are kept for review in ``$DATAQ_CONSOLE_SCREENSHOTS`` (a directory; the test's own when unset):
the documentation's images of each view come from there (``make screenshots``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from dataq.embedded.redis_server import free_port
from dataq.feed.client import Feeder
from testbed.cascade import Cascade
from testbed.waits import eventually
from tests.cascade_support import FAST, archived, feed, make_sources
from tests.helpers import checksum_of, make_records
from tests.pop_support import daemon_env
from tests.web.conftest import TOKEN
from tests.web.test_browser import DATAQ, FAILING, browser, open_when_served, suite, wait

__all__ = ["browser", "suite"]  # the fixtures this module uses from the first browser test's

SCREENSHOTS_ENV = "DATAQ_CONSOLE_SCREENSHOTS"


def shots(tmp_path: Path) -> Path:
    directory = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def snap(driver: WebDriver, directory: Path, name: str) -> None:
    path = directory / f"console-{name}.png"
    assert driver.save_screenshot(str(path)) and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def state_of(driver: WebDriver, queue: str) -> str:
    return driver.find_element(
        By.CSS_SELECTOR, f'tr[data-queue="{queue}"]:not([data-activity]) [data-field="state"] .state').text


def search(driver: WebDriver, text: str) -> list[tuple[str, str]]:
    """Type ``text`` into the search box, reached with ``/`` as an operator would; (path, where) per hit."""
    driver.find_element(By.TAG_NAME, "body").send_keys("/")
    box = driver.switch_to.active_element
    assert box.get_attribute("id") == "search", "'/' puts the cursor in the search box"
    box.clear()
    box.send_keys(text, Keys.ENTER)
    wait(driver, lambda d: d.find_elements(By.ID, "hits"), f"the search for {text}")
    rows = driver.find_elements(By.CSS_SELECTOR, "#hits tr[data-record]")
    return [(row.find_elements(By.TAG_NAME, "td")[2].text, row.find_elements(By.TAG_NAME, "td")[1].text)
            for row in rows]


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
