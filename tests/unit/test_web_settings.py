"""The [web] settings: the console on loopback, read-only until an operator token is set, and each mistake named."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataq.config import WebSettings, load_settings
from dataq.embedded.suite import plan_children
from tests.unit.test_mail_metrics_settings import error_of, load

CONFIG = Path(__file__).resolve().parents[2] / "config" / "dataq.toml"


def test_by_default_the_console_serves_read_only_on_loopback_and_dataq_run_starts_it() -> None:
    assert WebSettings() == WebSettings(enabled=True, host="127.0.0.1", port=9180, token="", allowed_hosts=())
    assert load_settings(CONFIG, environ={}).web == WebSettings()
    assert [child.argv[3:] for child in plan_children(load_settings(environ={})) if child.name == "web"] == [["web"]]


def test_a_token_and_an_address_are_taken_and_dataq_run_can_leave_the_console_out(tmp_path: Path) -> None:
    settings = load(tmp_path, '[web]\nhost = "0.0.0.0"\nport = 0\ntoken = "a-long-operator-token"\nenabled = false\n')
    assert settings.web == WebSettings(enabled=False, host="0.0.0.0", port=0, token="a-long-operator-token")
    assert [child.name for child in plan_children(settings)] == ["push:transfer", "pop:transfer"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[web]\ntoken = "short"', "key 'web.token' must be at least 16 characters without spaces"),
        ('[web]\ntoken = "a long token with spaces"', "key 'web.token' must be at least 16 characters"),
        ("[web]\nport = 70000", "key 'web.port' must be between 0 and 65535"),
        ("[web]\nhost = ''", "key 'web.host' must not be empty"),
        ("[web]\nenabled = 'yes'", "key 'web.enabled' must be a boolean"),
        ("[web]\npassword = 'x'", "unknown key 'web.password'"),
    ],
)
def test_each_mistake_is_an_error_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_of(tmp_path, text + "\n")


def test_allowed_hosts_are_kept_as_the_console_compares_them(tmp_path: Path) -> None:
    settings = load(tmp_path, '[web]\nallowed_hosts = ["DataQ.Example.org.", ".lab.example", "[::1]", "*"]\n')
    assert settings.web.allowed_hosts == ("dataq.example.org", ".lab.example", "::1", "*")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("http://dataq.example.org:9180/", "holds 'http://dataq.example.org:9180/', but a host has no scheme: "
                                           "write 'dataq.example.org'"),
        ("dataq.example.org/console", "but a host has no path: write 'dataq.example.org'"),
        ("dataq example.org", "but a host is a name or an address without spaces"),
        ("", "but a host is a name or an address without spaces"),
        ("dataq.example.org:9180", "but a host is named without a port: the console accepts any port"),
        ("[::1]:9180", "but a host is named without a port"),
        ("*.example.org", "'*' stands alone (any host); '.example.org' is a domain and its subdomains"),
        ("dätaq.example.org", "which is not a host name"),
        ("dataq..example.org", "which is not a host name"),
    ],
)
def test_each_malformed_allowed_host_is_an_error_naming_the_key_and_the_fix(tmp_path: Path, entry: str,
                                                                            expected: str) -> None:
    message = error_of(tmp_path, f'[web]\nallowed_hosts = ["localhost", "{entry}"]\n')
    assert "key 'web.allowed_hosts' holds" in message and expected in message


def test_allowed_hosts_must_be_a_list_of_strings(tmp_path: Path) -> None:
    assert "key 'web.allowed_hosts' must be a list of strings" in error_of(tmp_path, '[web]\nallowed_hosts = "x"\n')
