"""The [mail] and [metrics] settings sections: defaults, the example file, and each rule."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from dataq.config import MailSettings, MetricsSettings, Settings, load_settings
from dataq.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "dataq.toml"
ENV = {"HOME": "/home/op"}


def load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "dataq.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, environ=ENV)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return str(info.value)


def test_defaults_send_no_mail_and_serve_metrics_on_loopback() -> None:
    settings = load_settings(environ=ENV)
    assert settings.mail == MailSettings()
    assert not settings.mail.enabled
    assert (settings.mail.host, settings.mail.port, settings.mail.security) == ("127.0.0.1", 25, "none")
    assert settings.metrics == MetricsSettings()
    assert settings.metrics.host == "127.0.0.1"
    assert (settings.metrics.port_for("push"), settings.metrics.port_for("pop")) == (9108, 9109)


def test_example_file_documents_every_mail_and_metrics_key() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    for cls, table in ((MailSettings, "mail"), (MetricsSettings, "metrics")):
        assert re.search(rf"^\[{table}\]$", text, re.MULTILINE), f"config/dataq.toml lacks [{table}]"
        for f in dataclasses.fields(cls):
            assert re.search(rf"^#? ?{f.name} = ", text, re.MULTILINE), f"config/dataq.toml lacks {table}.{f.name}"
    settings = load_settings(EXAMPLE, environ=ENV)
    assert settings.mail == MailSettings()
    assert settings.metrics == MetricsSettings()


def test_a_full_mail_section_loads(tmp_path: Path) -> None:
    settings = load(tmp_path, """
[mail]
enabled = true
host = "smtp.example.org"
port = 587
security = "starttls"
username = "dataq"
password_env = "DATAQ_SMTP_PASSWORD"
sender = "dataq@example.org"
recipients = ["ops@example.org", "oncall@example.org"]
interval = 60
""")
    mail = settings.mail
    assert mail.recipients == ("ops@example.org", "oncall@example.org")
    assert mail.interval == 60.0 and isinstance(mail.interval, float)
    assert mail.password_file is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[mail]\nenabled = true", "key 'mail.recipients' must name at least one address when mail.enabled is true"),
        ("[mail]\nsecurity = 'ssl'", "key 'mail.security' must be one of none, starttls, tls; got 'ssl'"),
        ("[mail]\nport = 0", "key 'mail.port' must be between 1 and 65535, got 0"),
        ("[mail]\ninterval = 0", "key 'mail.interval' must be greater than 0"),
        ("[mail]\nexamples = 0", "key 'mail.examples' must be at least 1, got 0"),
        ("[mail]\nsystemic_failures = 0", "key 'mail.systemic_failures' must be at least 1, got 0"),
        ("[mail]\nredis_down_after = -1", "key 'mail.redis_down_after' must be at least 0"),
        ("[mail]\nrecipients = ['ops']", "key 'mail.recipients' holds 'ops', which is not a mail address"),
        ("[mail]\nsender = 'dataq'", "key 'mail.sender' holds 'dataq', which is not a mail address"),
        ("[mail]\nusername = 'u'", "key 'mail.username' needs 'mail.password_file' or 'mail.password_env'"),
        ("[mail]\npassword_env = 'PW'", "key 'mail.password_env' needs 'mail.username'"),
        ("[mail]\nusername = 'u'\npassword_env = 'PW'\npassword_file = '/pw'",
         "keys 'mail.password_file' and 'mail.password_env' exclude each other"),
        ("[mail]\npassword = 'hunter2'", "unknown key 'mail.password'"),
        ("[metrics]\npush_port = 70000", "key 'metrics.push_port' must be between 0 and 65535"),
        ("[metrics]\nhost = ''", "key 'metrics.host' must not be empty"),
        ("[metrics]\nenabled = 1", "key 'metrics.enabled' must be a boolean, got integer 1"),
    ],
)
def test_each_mistake_is_an_error_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_of(tmp_path, text + "\n")


def test_the_password_itself_has_no_key() -> None:
    assert "password" not in {f.name for f in dataclasses.fields(MailSettings)}
