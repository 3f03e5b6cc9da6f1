"""The [web] settings: the console on loopback, read-only until an operator token is set, and each mistake named."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataq.config import WebSettings, load_settings
from dataq.embedded.suite import plan_children
from tests.unit.test_mail_metrics_settings import error_of, load

CONFIG = Path(__file__).resolve().parents[2] / "config" / "dataq.toml"


def test_by_default_the_console_serves_read_only_on_loopback_and_dataq_run_starts_it() -> None:
    assert WebSettings() == WebSettings(enabled=True, host="127.0.0.1", port=9180, token="")
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
