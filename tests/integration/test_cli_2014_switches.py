"""The 2014 data-q's switches ``--host --port --cfg --loglevel``, in-process: dataq-cli's against a real Redis, and
``dataq push`` / ``dataq pop`` refusing bad values before they start (tests/e2e/test_2014_switches.py runs them)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import structlog
from click.testing import CliRunner, Result

from dataq.cli.console import main as console_main
from dataq.cli.main import main as dataq_main
from dataq.cli.options import EXIT_CONFIG, EXIT_OK, EXIT_USAGE
from dataq.config import RedisSettings, load_settings
from dataq.embedded.redis_server import free_port
from dataq.errors import ConfigError
from dataq.logs import HANDLER_NAME_PREFIX
from tests.cli_support import OTHER_QUEUE, by_switch, listed, seed, write_config

DB = 3
"""A database other than 0, to show that --host/--port keep the settings' database."""


def console(*args: str) -> Result:
    return CliRunner().invoke(console_main, list(args))


def dataq(*args: str) -> Result:
    return CliRunner().invoke(dataq_main, list(args))


def usage_error(result: Result) -> str:
    """The stderr of a call refused as a usage error: exit status 2, click's message, no traceback."""
    assert result.exit_code == EXIT_USAGE, (result.exit_code, result.stdout, result.stderr)
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.stderr
    assert result.stdout == ""
    return result.stderr


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """dataq-cli --loglevel configures this process's logging; undo it for the tests that follow."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if (h.get_name() or "").startswith(HANDLER_NAME_PREFIX)]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    structlog.reset_defaults()


# --- dataq-cli --host --port: the Redis server ---------------------------------------------------------------


@pytest.mark.parametrize("settings_url", ["elsewhere", "none"])
def test_host_and_port_reach_the_redis_they_name_whatever_the_settings_point_at(
    tmp_path: Path, redis_url: str, settings_url: str
) -> None:
    port = str(urlsplit(redis_url).port)
    if settings_url == "elsewhere":  # nothing listens there; its database is kept
        config = write_config(tmp_path, f"redis://127.0.0.1:{free_port()}/{DB}")
        switches = ["--host", "127.0.0.1", "--port", port]
        seed(f"{redis_url}/{DB}", 2)
    else:  # no [redis] url: --port alone means 127.0.0.1, database 0
        config = tmp_path / "dataq.toml"
        config.write_text(f'data_dir = "{tmp_path / "data"}"\n')
        switches = ["--port", port]
        seed(redis_url, 2)
    result = console("--cfg", str(config), *switches, "--summary", "--json")
    assert result.exit_code == EXIT_OK, result.stderr
    summary = by_switch(result.stdout)["summary"]
    assert (summary["active"], summary["tracked"]) == (2, 2)


@pytest.mark.parametrize(
    ("url", "host", "port", "expected"),
    [
        (None, None, 6380, "redis://127.0.0.1:6380/0"),
        (None, "db.example.org", None, "redis://db.example.org:6379/0"),
        ("redis://h:7000/3", None, 7001, "redis://h:7001/3"),
        ("rediss://user:secret@h/2?x=1", "::1", None, "rediss://user:secret@[::1]:6379/2?x=1"),
        ("unix:///run/redis.sock?db=5", "10.0.0.2", 7002, "redis://10.0.0.2:7002/5"),
    ],
)
def test_host_and_port_replace_only_the_host_and_port_of_the_settings_url(
    url: str | None, host: str | None, port: int | None, expected: str
) -> None:
    assert RedisSettings(url=url).url_at(host, port) == expected


def test_host_or_port_with_redis_is_a_usage_error(config: Path, redis_url: str) -> None:
    stderr = usage_error(console("--config", str(config), "--redis", redis_url, "--port", "6379", "--summary"))
    assert "--redis and --host/--port both name the Redis server" in stderr


def test_host_or_port_with_sentinels_in_the_settings_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "dataq.toml"
    config.write_text(f'data_dir = "{tmp_path}"\n[redis]\nsentinels = ["127.0.0.1:{free_port()}"]\n'
                      'master_name = "dataq"\n')
    stderr = usage_error(console("--cfg", str(config), "--host", "127.0.0.1", "--summary"))
    assert "--host/--port: the settings reach Redis through [redis] sentinels" in stderr


@pytest.mark.parametrize(
    ("switches", "message"),
    [
        (["--port", "abc"], "'abc' is not a valid integer"),
        (["--port", "0"], "--host/--port: port 0 is not between 1 and 65535"),
        (["--port", "65536"], "--host/--port: port 65536 is not between 1 and 65535"),
        (["--host", "a/b"], "--host/--port: 'a/b' is not a host name or an IP address"),
        (["--host", ""], "--host/--port: '' is not a host name or an IP address"),
        (["--loglevel", "loud"], "Invalid value for '--loglevel'"),
    ],
)
def test_bad_host_port_or_loglevel_is_a_usage_error(config: Path, switches: list[str], message: str) -> None:
    assert message in usage_error(console("--cfg", str(config), *switches, "--summary"))


def test_loglevel_debug_shows_diagnostics_on_stderr_and_leaves_stdout_as_it_was(
    config: Path, redis_url: str, restore_logging: None
) -> None:
    records = seed(redis_url, 2)
    plain = console("--cfg", str(config), "--list", "active")
    loud = console("--cfg", str(config), "--loglevel", "debug", "--list", "active")
    quiet = console("--cfg", str(config), "--loglevel", "ERROR", "--list", "active")
    assert plain.exit_code == loud.exit_code == quiet.exit_code == EXIT_OK
    assert plain.stdout == loud.stdout == quiet.stdout == "\n".join(listed(records[::-1])) + "\n"
    # Not a terminal: JSON lines ([log] format auto), from dataq and the libraries it uses (asyncio here).
    events = [json.loads(line) for line in loud.stderr.splitlines()]
    assert events and any(event["level"] == "debug" for event in events)
    assert {event["component"] for event in events} == {"dataq-cli"}
    assert plain.stderr == quiet.stderr == ""


# --- dataq push / dataq pop: refused before they start -------------------------------------------------------


@pytest.mark.parametrize("command", ["push", "pop"])
@pytest.mark.parametrize(
    ("switches", "message"),
    [
        (["--port", "70000"], "option --port: key 'push.port' must be between 0 and 65535, got 70000"),
        (["--port", "-1"], "option --port: key 'push.port' must be between 0 and 65535, got -1"),
        (["--queue", OTHER_QUEUE, "--port", "70000"],  # its own push_port is what --port replaces
         f"option --port: key 'queues.{OTHER_QUEUE}.push_port' must be between 0 and 65535, got 70000"),
        (["--port", "http"], "Invalid value for '--port': 'http' is not a valid integer"),
        (["--host", ""], "option --host: key 'push.host' must not be empty"),
        (["--loglevel", "verbose"], "Invalid value for '--loglevel'"),
    ],
)
def test_the_daemons_refuse_a_bad_switch_as_a_usage_error_naming_it(
    tmp_path: Path, command: str, switches: list[str], message: str
) -> None:
    config = write_config(tmp_path, f"redis://127.0.0.1:{free_port()}")
    assert message in usage_error(dataq(command, "--cfg", str(config), *switches))


def test_the_daemons_report_an_unknown_queue_or_a_missing_file_as_a_configuration_error(tmp_path: Path) -> None:
    config = write_config(tmp_path, f"redis://127.0.0.1:{free_port()}")
    unknown = dataq("push", "--cfg", str(config), "--queue", "nope", "--port", "1")
    missing = dataq("pop", "--cfg", str(tmp_path / "missing.toml"), "--loglevel", "DEBUG")
    assert unknown.exit_code == missing.exit_code == EXIT_CONFIG
    assert unknown.stderr.startswith("Error: unknown queue 'nope'")
    assert missing.stderr.startswith(f"Error: {tmp_path / 'missing.toml'}: cannot read the settings file")


def test_command_line_overrides_win_over_the_environment_and_are_checked_like_the_key_they_set(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, "redis://127.0.0.1:6379")
    environ = {"HOME": str(tmp_path), "DATAQ_PUSH_PORT": "9000", "DATAQ_LOG_LEVEL": "info"}
    options = {("push", "port"): ("--port", 9001), ("log", "level"): ("--loglevel", "debug")}
    settings = load_settings(config, environ, options)
    assert (settings.push.port, settings.log.level) == (9001, "debug")
    with pytest.raises(ConfigError, match=r"^option --loglevel: key 'log.level' must be one of"):
        load_settings(config, environ, {("log", "level"): ("--loglevel", "loud")})
