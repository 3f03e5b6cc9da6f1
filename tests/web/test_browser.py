"""The console in a real browser (headless Chromium from Debian's packages, driven through chromedriver by
selenium), served by a real ``dataq run``: its embedded Redis, push and pop daemons and web console."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from dataq.embedded.redis_server import find_running, free_port
from dataq.feed.client import Feeder
from dataq.store import QueueStore
from tests.e2e.test_suite import stop_suite
from tests.helpers import make_records
from tests.pop_support import daemon_env
from tests.web.conftest import TOKEN

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FAILING = 3
WAIT = 30.0
DATAQ = [sys.executable, "-c", "from dataq.cli.main import main; main()"]
SCREENSHOT_ENV = "DATAQ_CONSOLE_SCREENSHOT"
"""Where to keep the overview's screenshot (the documentation's); a temporary file when unset."""


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = CHROMIUM
    # Background networking off: this machine's network is closed, and the console needs nothing from outside.
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--window-size=1280,900", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def failing_suite(tmp_path: Path, message: str, *extra: str) -> Iterator[tuple[str, int, Path]]:
    """``dataq run`` with queue ``transfer`` whose action always fails with ``message`` (max_errors 0), and the
    ``extra`` lines of settings: (console URL, push port, settings file)."""
    web_port, push_port, data_dir = free_port(), free_port(), tmp_path / "data"
    config = tmp_path / "dataq.toml"
    config.write_text("\n".join([
        f'data_dir = "{data_dir}"', "[log]", f'dir = "{tmp_path / "log"}"', 'level = "warning"',
        "[push]", f"port = {push_port}", "[metrics]", "push_port = 0", "pop_port = 0", *extra,
        "[web]", f"port = {web_port}", f'token = "{TOKEN}"',
        "[queues.transfer]", 'actions = ["fail"]', "max_errors = 0",
        "[queues.transfer.fail]", f'message = "{message}"',
    ]) + "\n")
    process = subprocess.Popen([*DATAQ, "run", "--config", str(config)], env={**daemon_env(), "HOME": str(tmp_path)},
                               stderr=subprocess.PIPE)
    try:
        yield f"http://127.0.0.1:{web_port}", push_port, config
    finally:
        stop_suite(process, 15, data_dir)


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    """``dataq run`` with a queue whose action always fails (max_errors 0): (console URL, push port, data dir)."""
    with failing_suite(tmp_path, "rsync: connection refused by valley.example") as (url, push_port, _):
        yield url, push_port, tmp_path / "data"


def cell(driver: WebDriver, queue: str, field: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, f'tr[data-queue="{queue}"] [data-field="{field}"]').text


def wait(driver: WebDriver, condition: object, what: str) -> None:
    # A cell the live refresh redrew between finding it and reading it is looked for again.
    WebDriverWait(driver, WAIT, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)).until(
        condition, message=f"timed out waiting for {what}")


def open_when_served(driver: WebDriver, url: str) -> None:
    deadline = time.monotonic() + WAIT
    while True:
        with contextlib.suppress(WebDriverException):  # refused while dataq run starts the console
            driver.get(url)
            if "queues" in driver.title:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"the console never answered at {url}")
        time.sleep(0.3)


def fetch_status(driver: WebDriver, path: str, body: str, content_type: str) -> int:
    """POST from the page's own origin, as a script of the page would; the response's status."""
    status: int = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', body: arguments[1], headers: {'Content-Type': arguments[2]}})"
        ".then((r) => done(r.status), () => done(-1));", path, body, content_type)
    return status


@pytest.mark.timeout(180)
def test_an_operator_watches_the_queue_sees_why_records_failed_and_acts_only_with_the_token(
        browser: WebDriver, suite: tuple[str, int, Path], tmp_path: Path) -> None:
    url, push_port, data_dir = suite
    open_when_served(browser, url + "/")
    assert cell(browser, "transfer", "inactive") == "0"

    # Records fail while the page is open: its numbers follow without a reload.
    result = asyncio.run(Feeder("127.0.0.1", push_port, window=10, retry_for=30).feed(make_records(FAILING)))
    assert result.pushed == FAILING
    wait(browser, lambda d: cell(d, "transfer", "inactive") == str(FAILING), "the overview to count the failures")
    assert cell(browser, "transfer", "action") == "on"
    assert int(cell(browser, "transfer", "workers")) == 2  # the push and the pop daemon
    screenshot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "overview.png")
    assert browser.save_screenshot(str(screenshot)) and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    browser.get(url + "/queues/transfer")
    inactive = browser.find_element(By.ID, "inactive").text
    assert "rsync: connection refused by valley.example" in inactive

    # Without the token: no action form, and a hand-made request is refused.
    assert not browser.find_elements(By.ID, "op-action-off")
    assert fetch_status(browser, "/queues/transfer/do", "op=action-off&csrf=x",
                        "application/x-www-form-urlencoded") == 401
    assert fetch_status(browser, "/api/queues/transfer/action", '{"on": false}', "application/json") == 401

    browser.get(url + "/login")
    browser.find_element(By.ID, "token").send_keys("not-the-operator-token")
    browser.find_element(By.ID, "login").click()
    wait(browser, lambda d: d.find_elements(By.ID, "login-failed"), "the wrong token to be refused")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "login").click()
    wait(browser, lambda d: d.current_url == url + "/", "the login to lead to the overview")

    browser.get(url + "/queues/transfer")
    browser.find_element(By.ID, "op-action-off").click()
    wait(browser, lambda d: "action: off" in d.find_element(By.ID, "message").text, "the action's outcome")
    assert browser.find_element(By.CSS_SELECTOR, '#counts [data-field="action"]').text == "off"
    redis_url = find_running(data_dir)
    assert redis_url is not None
    assert asyncio.run(action_flag(redis_url)) is False


async def action_flag(redis_url: str) -> bool:
    store = QueueStore.from_url(redis_url, "transfer")
    try:
        return (await store.summary()).action
    finally:
        await store.close()
