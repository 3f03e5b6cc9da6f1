"""The console answers only to the hosts it knows (against DNS rebinding), and exports its process to Prometheus."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from structlog.testing import capture_logs

from dataq.config import load_settings
from dataq.web.console import Console
from dataq.web.server import make_app
from tests.web.conftest import Web

PROMTOOL = shutil.which("promtool")
Client = TestClient[web.Request, web.Application]
Serve = Callable[[str], Awaitable[Client]]


async def status_and_text(client: Client, host: str, path: str = "/") -> tuple[int, str]:
    response = await client.get(path, headers={"Host": host})
    return response.status, await response.text()


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Serve]:
    """A console (no queues, so no Redis) built from the [web] table given as TOML text."""
    clients: list[Client] = []

    async def serve(web_table: str) -> Client:
        config = tmp_path / f"dataq-{len(clients)}.toml"
        config.write_text(f"[web]\n{web_table}\n", encoding="utf-8")
        client = TestClient(TestServer(make_app(Console(load_settings(config, environ={}), {}), "")))
        clients.append(client)
        await client.start_server()
        return client

    yield serve
    for client in clients:
        await client.close()


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "EVIL.example.:80"])
async def test_a_request_for_a_host_the_console_does_not_know_is_misdirected(web: Web, host: str) -> None:
    for path in ("/", "/api/queues", "/metrics", "/no/such/page"):
        status, text = await status_and_text(web.client, host.format(port=web.client.port), path)
        assert status == 421
        assert "does not answer to the host 'evil.example'" in text
        assert "add 'evil.example' to allowed_hosts in the [web] table" in text


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "LocalHost.:8080",
                                  "localhost", "10.1.2.3:443"])
async def test_loopback_names_and_any_address_pass_on_any_port(web: Web, host: str) -> None:
    status, text = await status_and_text(web.client, host.format(port=web.client.port), "/api/queues")
    assert status == 200, text


@pytest.mark.parametrize("host", ["evil.example:80:80", "[evil.example]:80", "evil.example:eighty", ":80"])
async def test_a_malformed_host_header_is_refused(web: Web, host: str) -> None:
    status, text = await status_and_text(web.client, host)
    assert status == 421 and "is malformed" in text


async def test_configured_hosts_and_domains_pass_and_the_defaults_still_do(console: Serve) -> None:
    client = await console('allowed_hosts = ["dataq.example.org", ".lab.example"]')
    for host in ("dataq.example.org:443", "lab.example", "daq.lab.example:9180", "localhost", "127.0.0.1"):
        assert (await status_and_text(client, host, "/metrics"))[0] == 200, host
    for host in ("example.org", "evil.dataq.example.org", "evillab.example"):
        assert (await status_and_text(client, host, "/metrics"))[0] == 421, host


async def test_a_console_on_every_interface_answers_to_the_machine_names(console: Serve) -> None:
    loopback, everywhere = await console(""), await console('host = "0.0.0.0"')
    name = socket.gethostname()
    assert (await status_and_text(everywhere, f"{name}:9180", "/metrics"))[0] == 200
    assert (await status_and_text(loopback, f"{name}:9180", "/metrics"))[0] == 421
    assert (await status_and_text(everywhere, "evil.example", "/metrics"))[0] == 421


async def test_a_star_answers_to_any_host_and_is_warned_about(console: Serve) -> None:
    with capture_logs() as logs:
        client = await console('allowed_hosts = ["*"]')
    assert (await status_and_text(client, "evil.example:9180", "/metrics"))[0] == 200
    assert [entry["log_level"] for entry in logs if "answers to any host" in entry["event"]] == ["warning"]


async def test_each_refused_host_is_logged_once(web: Web) -> None:
    with capture_logs() as logs:
        for host in ("evil.example", "evil.example:1", "other.example", "evil.example"):
            await status_and_text(web.client, host)
    refused = [entry for entry in logs if entry["event"].startswith("web console refused")]
    assert [(entry["log_level"], entry["host"]) for entry in refused] == [("warning", "evil.example"),
                                                                          ("warning", "other.example")]
    assert all(entry["setting"] == "web.allowed_hosts" for entry in refused)


async def test_an_http_1_0_request_without_host_is_served(console: Serve) -> None:
    client = await console("")
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.0 200 OK") and b"process_resident_memory_bytes" in answer


async def test_metrics_export_the_console_process_in_the_text_format(web: Web) -> None:
    response = await web.client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = await response.text()
    for family in ("process_resident_memory_bytes", "process_open_fds", "python_info", "python_gc_objects_collected"):
        assert f"\n{family}" in text, family


async def test_promtool_finds_nothing_to_say_about_the_metrics(web: Web) -> None:
    assert PROMTOOL is not None, "promtool is missing: `make install-test` installs Debian's prometheus package"
    text = await (await web.client.get("/metrics")).text()
    check = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60, check=False)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check


async def test_metrics_turned_off_in_the_settings_are_not_served(console: Serve) -> None:
    client = await console("\n[metrics]\nenabled = false")
    assert (await client.get("/metrics", headers={"Host": "localhost"})).status == 404


async def test_metrics_come_as_openmetrics_when_the_scraper_asks(web: Web) -> None:
    response = await web.client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert (await response.text()).rstrip().endswith("# EOF")
