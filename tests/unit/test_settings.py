"""Settings: defaults, the example file, environment overrides, and one test per kind of mistake."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from dataq.config import (
    DEFAULT_QUEUE,
    ENV_OVERRIDES,
    EventSettings,
    HealthSettings,
    LogSettings,
    PopSettings,
    PushSettings,
    QueueSettings,
    RedisSettings,
    Settings,
    default_data_dir,
    load_settings,
    settings_file,
)
from dataq.config.activity_settings import ActivitySettings
from dataq.errors import ConfigError
from dataq.record import DEFAULT_CHECKSUM_PATTERN

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "dataq.toml"
ENV = {"HOME": "/home/op"}
"""A clean environment: no DATAQ_* variable of the machine running the tests leaks in."""


def write(tmp_path: Path, text: str, name: str = "dataq.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str, **env: str) -> Settings:
    return load_settings(write(tmp_path, text), environ={**ENV, **env})


def error_of(tmp_path: Path, text: str, **env: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, **env)
    return str(info.value)


# --- defaults and sources ------------------------------------------------------------------------------------


def test_no_file_gives_every_default() -> None:
    settings = load_settings(environ=ENV)
    assert settings.source is None
    assert settings.data_dir == "/home/op/.local/state/dataq"
    assert settings.redis == RedisSettings()
    assert settings.redis.url is None
    assert settings.redis.appendfsync == "always"
    assert settings.push == PushSettings()
    assert (settings.push.host, settings.push.port) == ("127.0.0.1", 9988)
    assert settings.pop == PopSettings()
    assert settings.events == EventSettings()
    assert settings.log == LogSettings()
    assert list(settings.queues) == [DEFAULT_QUEUE]
    queue = settings.queue(None)
    assert queue == QueueSettings(DEFAULT_QUEUE)
    assert queue.actions == ("echo",)
    assert queue.max_errors == 0
    assert queue.rules.checksum_pattern == DEFAULT_CHECKSUM_PATTERN
    assert settings.push_port_for(DEFAULT_QUEUE) == 9988


def test_data_dir_defaults_to_xdg_state_home_when_absolute() -> None:
    assert default_data_dir({"XDG_STATE_HOME": "/state", "HOME": "/home/op"}) == "/state/dataq"
    assert default_data_dir({"XDG_STATE_HOME": "relative", "HOME": "/home/op"}) == "/home/op/.local/state/dataq"
    assert load_settings(environ={"XDG_STATE_HOME": "/state"}).data_dir == "/state/dataq"


def test_example_file_loads_cleanly() -> None:
    settings = load_settings(EXAMPLE, environ=ENV)
    assert settings.source == str(EXAMPLE)
    assert list(settings.queues) == ["transfer", "submit"]
    assert settings.queue("transfer").actions == ("echo",)
    assert settings.push_port_for("transfer") == 9988
    assert settings.push_port_for("submit") == 9989
    assert settings.redis.url is None  # "" means: run the embedded server
    assert settings.push.tls_cert is None


def test_example_file_documents_every_key() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    sections: list[type] = [RedisSettings, PushSettings, PopSettings, EventSettings, LogSettings, QueueSettings,
                           HealthSettings]
    filled = {"name", "action_options", "activities"}  # the table's name, and its sub-tables
    keys = ["data_dir"]
    keys += [f.name for cls in sections for f in dataclasses.fields(cls) if f.init and f.name not in filled]
    keys += [f.name for f in dataclasses.fields(ActivitySettings) if f.init and f.name not in filled]
    for key in keys:
        assert re.search(rf"^#? ?{key} = ", text, re.MULTILINE), f"config/dataq.toml lacks {key!r}"
    assert re.search(r"^#? ?\[queues\.[a-z]+\.activities\.[a-z]+\]$", text, re.MULTILINE)


def test_dataq_config_names_the_file_when_no_path_is_given(tmp_path: Path) -> None:
    path = write(tmp_path, "[push]\nport = 7000\n")
    settings = load_settings(environ={**ENV, "DATAQ_CONFIG": str(path)})
    assert settings.source == str(path)
    assert settings.push.port == 7000


def test_an_explicit_path_wins_over_dataq_config(tmp_path: Path) -> None:
    chosen = write(tmp_path, "[push]\nport = 7001\n", "chosen.toml")
    other = write(tmp_path, "[push]\nport = 7002\n", "other.toml")
    assert load_settings(chosen, environ={**ENV, "DATAQ_CONFIG": str(other)}).push.port == 7001


def test_empty_dataq_config_means_no_file() -> None:
    assert load_settings(environ={**ENV, "DATAQ_CONFIG": ""}).source is None


def test_the_system_settings_file_is_read_when_no_other_is_named(tmp_path: Path) -> None:
    system = write(tmp_path, "[push]\nport = 7003\n", "system.toml")
    settings = load_settings(environ=ENV, system_config=str(system))
    assert settings.source == str(system) and settings.push.port == 7003


def test_the_lookup_order_is_config_option_then_dataq_config_then_the_system_file(tmp_path: Path) -> None:
    chosen = write(tmp_path, "", "chosen.toml")
    named = write(tmp_path, "", "named.toml")
    system = write(tmp_path, "", "system.toml")
    assert settings_file(chosen, {"DATAQ_CONFIG": str(named)}, str(system)) == str(chosen)
    assert settings_file(None, {"DATAQ_CONFIG": str(named)}, str(system)) == str(named)
    assert settings_file(None, {}, str(system)) == str(system)
    assert settings_file(None, {"DATAQ_CONFIG": ""}, str(system)) is None
    assert settings_file(None, {}, str(tmp_path / "absent.toml")) is None


def test_an_unreadable_system_file_says_how_to_do_without_it(tmp_path: Path) -> None:
    system = tmp_path / "dataq.toml"
    system.mkdir()  # exists, and cannot be read as a file (even by root)
    with pytest.raises(ConfigError, match=rf"^{system}: cannot read the settings file: .* \(read by default; name "
                       r"another with --config FILE, or none with DATAQ_CONFIG=\)$"):
        load_settings(environ=ENV, system_config=str(system))


def test_file_values_replace_defaults_and_keep_queue_order(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        """
data_dir = "/srv/dataq"
[pop]
heartbeat_interval = 2      # an integer where a number is expected
[queues.zeta]
actions = ["echo", "sleep"]
[queues.alpha]
max_errors = 5
push_port = 9989
""",
    )
    assert settings.data_dir == "/srv/dataq"
    assert settings.pop.heartbeat_interval == 2.0
    assert isinstance(settings.pop.heartbeat_interval, float)
    assert list(settings.queues) == ["zeta", "alpha"]
    assert settings.queue(None).name == "zeta"
    assert settings.queue("zeta").actions == ("echo", "sleep")
    assert settings.queue("alpha").max_errors == 5


def test_action_sub_tables_become_frozen_action_options(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        """
[queues.transfer]
actions = ["echo", "sleep"]
[queues.transfer.sleep]
seconds = 2
hosts = ["a", "b"]
[queues.transfer.sleep.nested]
x = 1
""",
    )
    options = settings.queue("transfer").action_options
    assert list(options) == ["sleep"]
    assert options["sleep"]["seconds"] == 2
    assert options["sleep"]["hosts"] == ("a", "b")
    assert isinstance(options["sleep"]["nested"], Mapping)
    with pytest.raises(TypeError):
        options["sleep"]["seconds"] = 3  # type: ignore[index]


def test_empty_string_means_unset_for_optional_keys(tmp_path: Path) -> None:
    settings = load(tmp_path, '[redis]\nurl = ""\n[log]\ndir = ""\n[push]\nresume_below = ""\n')
    assert settings.redis.url is None
    assert settings.log.dir is None
    assert settings.push.resume_below is None


# --- environment overrides ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "text", "read", "expected"),
    [
        ("DATAQ_REDIS_URL", "redis://db:6379/1", lambda s: s.redis.url, "redis://db:6379/1"),
        ("DATAQ_REDIS_URL", "", lambda s: s.redis.url, None),
        ("DATAQ_DATA_DIR", "/env/data", lambda s: s.data_dir, "/env/data"),
        ("DATAQ_LOG_DIR", "/env/log", lambda s: s.log.dir, "/env/log"),
        ("DATAQ_LOG_LEVEL", "debug", lambda s: s.log.level, "debug"),
        ("DATAQ_PUSH_HOST", "0.0.0.0", lambda s: s.push.host, "0.0.0.0"),
        ("DATAQ_PUSH_PORT", "7777", lambda s: s.push.port, 7777),
    ],
)
def test_environment_overrides_the_file(
    tmp_path: Path, variable: str, text: str, read: Callable[[Settings], object], expected: object
) -> None:
    file_text = """
data_dir = "/file/data"
[redis]
url = "redis://file:6379/0"
[log]
dir = "/file/log"
level = "error"
[push]
host = "10.0.0.1"
port = 6000
"""
    assert read(load(tmp_path, file_text, **{variable: text})) == expected


def test_every_documented_override_is_tested() -> None:
    assert set(ENV_OVERRIDES) == {
        "DATAQ_REDIS_URL", "DATAQ_DATA_DIR", "DATAQ_LOG_DIR", "DATAQ_LOG_LEVEL", "DATAQ_PUSH_HOST", "DATAQ_PUSH_PORT",
    }


def test_environment_overrides_apply_without_a_file() -> None:
    settings = load_settings(environ={**ENV, "DATAQ_PUSH_PORT": "0", "DATAQ_LOG_LEVEL": "warning"})
    assert (settings.push.port, settings.log.level) == (0, "warning")


def test_mistyped_environment_value_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    message = error_of(tmp_path, "", DATAQ_PUSH_PORT="http")
    assert message == "environment variable DATAQ_PUSH_PORT: key 'push.port' must be an integer, got string 'http'"


def test_out_of_range_environment_value_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    assert error_of(tmp_path, "", DATAQ_PUSH_PORT="70000") == (
        "environment variable DATAQ_PUSH_PORT: key 'push.port' must be between 0 and 65535, got 70000"
    )
    assert error_of(tmp_path, "", DATAQ_LOG_LEVEL="loud").startswith(
        "environment variable DATAQ_LOG_LEVEL: key 'log.level' must be one of debug, info, warning, error"
    )
    assert "DATAQ_REDIS_URL" in error_of(tmp_path, "", DATAQ_REDIS_URL="http://x")
    assert "DATAQ_DATA_DIR" in error_of(tmp_path, "", DATAQ_DATA_DIR="relative/dir")


# --- mistakes in the file ------------------------------------------------------------------------------------


def test_unknown_key_is_an_error_naming_file_key_and_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "dataq.toml"
    message = error_of(tmp_path, "[queues.transfer]\nmax_error = 3\n")
    assert message == f"{path}: unknown key 'queues.transfer.max_error'; did you mean 'max_errors'?"


def test_unknown_top_level_key_and_section_key_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "dataq.toml"
    assert error_of(tmp_path, 'data_dri = "/x"\n') == f"{path}: unknown key 'data_dri'; did you mean 'data_dir'?"
    assert error_of(tmp_path, "[pus]\nport = 1\n") == f"{path}: unknown key 'pus'; did you mean 'push'?"
    assert error_of(tmp_path, "[pop]\nconcurency = 2\n") == (
        f"{path}: unknown key 'pop.concurency'; did you mean 'concurrency'?"
    )


def test_unknown_key_without_a_close_match_lists_the_keys(tmp_path: Path) -> None:
    message = error_of(tmp_path, "[events]\nzzz = 1\n")
    assert message.endswith("unknown key 'events.zzz'; the keys here are: max_len, max_age")


def test_a_filled_field_is_not_a_config_key(tmp_path: Path) -> None:
    assert "unknown key 'queues.transfer.name'" in error_of(tmp_path, '[queues.transfer]\nname = "x"\n')
    assert "unknown key 'source'" in error_of(tmp_path, 'source = "x"\n')


def test_mistyped_value_is_an_error_naming_file_key_expected_and_got(tmp_path: Path) -> None:
    path = tmp_path / "dataq.toml"
    assert error_of(tmp_path, "[push]\nport = '99'\n") == (
        f"{path}: key 'push.port' must be an integer, got string '99'"
    )
    assert error_of(tmp_path, "[pop]\ngrace_period = 'long'\n").endswith(
        "key 'pop.grace_period' must be a number, got string 'long'"
    )
    assert error_of(tmp_path, "[redis]\nurl = 5\n").endswith("key 'redis.url' must be a string, got integer 5")
    assert error_of(tmp_path, "[push]\nport = 1.5\n").endswith("key 'push.port' must be an integer, got float 1.5")
    assert error_of(tmp_path, "push = 5\n").endswith("key 'push' must be a table, got integer 5")
    assert error_of(tmp_path, "[queues]\ntransfer = 1\n").endswith(
        "key 'queues.transfer' must be a table, got integer 1"
    )
    assert error_of(tmp_path, '[queues.transfer]\nactions = "echo"\n').endswith(
        "key 'queues.transfer.actions' must be a list of strings, got string 'echo'"
    )
    assert error_of(tmp_path, "[queues.transfer]\nactions = ['echo', 3]\n").endswith(
        "key 'queues.transfer.actions[1]' must be a string, got integer 3"
    )


def test_bool_is_not_an_integer_or_a_number(tmp_path: Path) -> None:
    assert error_of(tmp_path, "[pop]\nconcurrency = true\n").endswith(
        "key 'pop.concurrency' must be an integer, got boolean true"
    )
    assert error_of(tmp_path, "[pop]\nsweep_interval = false\n").endswith(
        "key 'pop.sweep_interval' must be a number, got boolean false"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[push]\nport = 65536", "key 'push.port' must be between 0 and 65535, got 65536"),
        ("[push]\nport = -1", "key 'push.port' must be between 0 and 65535, got -1"),
        ("[queues.transfer]\npush_port = 70000", "key 'queues.transfer.push_port' must be between 0 and 65535"),
        ("[pop]\nconcurrency = 0", "key 'pop.concurrency' must be at least 1, got 0"),
        ("[queues.transfer]\nmax_errors = -1", "key 'queues.transfer.max_errors' must be at least 0, got -1"),
        ("[queues.transfer]\nmax_queue_size = 0", "key 'queues.transfer.max_queue_size' must be at least 1, got 0"),
        ("[queues.transfer]\naction_timeout = 0", "key 'queues.transfer.action_timeout' must be greater than 0"),
        ("[queues.transfer]\nretry_delay = -1", "key 'queues.transfer.retry_delay' must be at least 0"),
        ("[queues.transfer]\nretry_backoff = 0.5", "key 'queues.transfer.retry_backoff' must be at least 1"),
        ("[queues.transfer]\nretry_delay = 600\nretry_max_delay = 60",
         "key 'queues.transfer.retry_max_delay' (60.0) must not be less than queues.transfer.retry_delay (600.0)"),
        ("[pop]\nunreachable_after = 0", "key 'pop.unreachable_after' must be at least 1, got 0"),
        ("[push]\nmax_memory = 0", "key 'push.max_memory' must be greater than 0"),
        ("[push]\nresume_memory = 0.5", "key 'push.resume_memory' needs 'push.max_memory'"),
        ("[push]\nmax_memory = 0.8\nresume_memory = 0.9",
         "key 'push.resume_memory' (0.9) must be less than 'push.max_memory' (0.8)"),
        ("[push]\nmax_memory = 1e9\nresume_memory = 0.5",
         "key 'push.resume_memory' (0.5) and 'push.max_memory' (1e+09) must both be fractions of maxmemory"),
        ("[pop]\nprobe_delay = 0", "key 'pop.probe_delay' must be greater than 0"),
        ("[pop]\nprobe_delay = 30\nprobe_max_delay = 10",
         "key 'pop.probe_max_delay' (10.0) must not be less than pop.probe_delay (30.0)"),
        ("[redis]\nsocket_timeout = 0", "key 'redis.socket_timeout' must be greater than 0, got 0.0"),
        ("[push]\nidle_timeout = -5", "key 'push.idle_timeout' must be greater than 0"),
        ("[push]\nbatch_max = 0", "key 'push.batch_max' must be at least 1, got 0"),
        ("[push]\nmax_connections = 0", "key 'push.max_connections' must be at least 1, got 0"),
        ("[push]\nmax_line_bytes = 255", "key 'push.max_line_bytes' must be at least 256, got 255"),
        ("[push]\nresume_below = -1", "key 'push.resume_below' must be at least 0, got -1"),
        ("[pop]\nheartbeat_interval = 0", "key 'pop.heartbeat_interval' must be greater than 0"),
        ("[pop]\nsweep_interval = inf", "key 'pop.sweep_interval' must be a finite number, got inf"),
        ("[pop]\nheartbeat_ttl = 1.0", "key 'pop.heartbeat_ttl' (1.0) must be greater than pop.heartbeat_interval"),
        ("[push]\nheartbeat_interval = 20",
         "key 'push.heartbeat_ttl' (10.0) must be greater than push.heartbeat_interval"),
        ("[push]\nheartbeat_ttl = -1", "key 'push.heartbeat_ttl' must be greater than 0, got -1"),
        ("[events]\nmax_len = 0", "key 'events.max_len' must be at least 1, got 0"),
        ("[events]\nmax_age = 0", "key 'events.max_age' must be greater than 0"),
        ("[redis]\nappendfsync = 'sometimes'", "key 'redis.appendfsync' must be one of always, everysec, no"),
        ("[log]\nlevel = 'verbose'", "key 'log.level' must be one of debug, info, warning, error; got 'verbose'"),
        ("[log]\nformat = 'xml'", "key 'log.format' must be one of auto, json, console; got 'xml'"),
        ("[log]\ndir = 'logs'", "key 'log.dir' must be an absolute path, got 'logs'"),
        ("data_dir = 'state'", "key 'data_dir' must be an absolute path, got 'state'"),
        ("[push]\nhost = ''", "key 'push.host' must not be empty"),
        ("[push]\ntls_cert = '/c.pem'", "keys 'push.tls_cert' and 'push.tls_key' must be given together"),
        ("[push]\ntls_key = '/k.pem'", "keys 'push.tls_cert' and 'push.tls_key' must be given together"),
        ("[push]\ntls_ca = '/ca.pem'", "key 'push.tls_ca' needs 'push.tls_cert' and 'push.tls_key'"),
        ("[redis]\ncert_file = '/c.pem'", "keys 'redis.cert_file' and 'redis.key_file' must be given together"),
        ("[queues.transfer]\nactions = []", "key 'queues.transfer.actions' must name at least one action"),
        ("[queues.transfer]\nactions = ['echo', 'echo']", "key 'queues.transfer.actions' names 'echo' more than once"),
        ("[queues.transfer]\nactions = ['a b']", "key 'queues.transfer.actions' holds an invalid action name 'a b'"),
        ("[queues]", "key 'queues' must define at least one queue"),
    ],
)
def test_value_out_of_range_is_an_error_naming_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    message = error_of(tmp_path, text + "\n")
    assert message.startswith(f"{tmp_path / 'dataq.toml'}: ")
    assert expected in message


def test_port_zero_and_resume_below_zero_are_allowed(tmp_path: Path) -> None:
    settings = load(tmp_path, "[push]\nport = 0\nresume_below = 0\n[queues.a]\n[queues.b]\n")
    assert settings.push_port_for("a") == settings.push_port_for("b") == 0
    assert settings.push.resume_below == 0


def test_bad_redis_url_scheme_is_an_error(tmp_path: Path) -> None:
    assert error_of(tmp_path, "[redis]\nurl = 'http://x'\n") == (
        f"{tmp_path / 'dataq.toml'}: redis.url 'http://x' must start with redis://, rediss:// or unix://"
    )


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "rediss://db:6380", "unix:///run/redis.sock"])
def test_redis_url_schemes_are_accepted(tmp_path: Path, url: str) -> None:
    assert load(tmp_path, f"[redis]\nurl = '{url}'\n").redis.url == url


def test_action_sub_table_not_in_actions_is_an_error(tmp_path: Path) -> None:
    message = error_of(tmp_path, "[queues.transfer]\nactions = ['echo']\n[queues.transfer.disk_store]\nroot = '/d'\n")
    assert message == (
        f"{tmp_path / 'dataq.toml'}: queues.transfer.disk_store: options for action 'disk_store', "
        "which is not in queues.transfer.actions"
    )


def test_two_queues_on_the_same_push_port_is_an_error_asking_for_push_port(tmp_path: Path) -> None:
    message = error_of(tmp_path, "[queues.transfer]\n[queues.submit]\n")
    assert "queues 'transfer' and 'submit' would both listen on push port 9988" in message
    assert "push_port" in message
    explicit = error_of(tmp_path, "[queues.transfer]\npush_port = 7000\n[queues.submit]\npush_port = 7000\n")
    assert "would both listen on push port 7000" in explicit
    assert "would both listen on push port 9989" in error_of(
        tmp_path, "[queues.transfer]\n[queues.submit]\npush_port = 9989\n", DATAQ_PUSH_PORT="9989"
    )


def test_invalid_queue_name_is_an_error(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[queues."bad name"]\n')
    assert message.startswith(f"{tmp_path / 'dataq.toml'}: queue name 'bad name' is invalid")
    assert "queue name 'x{y}' is invalid" in error_of(tmp_path, '[queues."x{y}"]\n')


def test_invalid_checksum_pattern_is_an_error(tmp_path: Path) -> None:
    message = error_of(tmp_path, "[queues.transfer]\nchecksum_pattern = '[0-9'\n")
    assert message.startswith(f"{tmp_path / 'dataq.toml'}: key 'queues.transfer.checksum_pattern': ")
    assert "not a valid regex" in message


def test_custom_checksum_pattern_gives_the_queue_its_rules(tmp_path: Path) -> None:
    settings = load(tmp_path, "[queues.transfer]\nchecksum_pattern = '[0-9A-F]{8}'\n")
    assert settings.queue("transfer").rules.check_checksum("DEADBEEF") == "DEADBEEF"


def test_toml_syntax_error_is_an_error_naming_the_file(tmp_path: Path) -> None:
    message = error_of(tmp_path, "[push\nport = 1\n")
    assert message.startswith(f"{tmp_path / 'dataq.toml'}: invalid TOML: ")


def test_missing_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match=re.escape(f"{path}: cannot read the settings file")):
        load_settings(path, environ=ENV)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: cannot read")):
        load_settings(environ={**ENV, "DATAQ_CONFIG": str(path)})


def test_a_directory_is_not_a_settings_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path}: cannot read the settings file")):
        load_settings(tmp_path, environ=ENV)


# --- the objects ---------------------------------------------------------------------------------------------


def test_settings_are_frozen(tmp_path: Path) -> None:
    settings = load(tmp_path, "[queues.transfer]\n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.data_dir = "/elsewhere"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.push.port = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.queue("transfer").max_errors = 9  # type: ignore[misc]
    assert hash(settings) == hash(load(tmp_path, "[queues.transfer]\n"))  # usable as a dict key
    with pytest.raises(TypeError):
        settings.queues["other"] = QueueSettings("other")  # type: ignore[index]


def test_queue_lookup_returns_the_named_queue_or_the_first() -> None:
    settings = load_settings(EXAMPLE, environ=ENV)
    assert settings.queue("submit").name == "submit"
    assert settings.queue(None).name == "transfer"


def test_unknown_queue_is_an_error_listing_the_configured_names() -> None:
    settings = load_settings(EXAMPLE, environ=ENV)
    with pytest.raises(ConfigError) as info:
        settings.queue("trasnfer")
    assert str(info.value) == f"unknown queue 'trasnfer'; the queues configured in {EXAMPLE} are: transfer, submit"
    with pytest.raises(ConfigError, match="unknown queue"):
        settings.push_port_for("nope")


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ConfigError, match=r"key 'port' must be between 0 and 65535"):
        PushSettings(port=-1)
    with pytest.raises(ConfigError, match="options for action 'disk_store'"):
        QueueSettings("transfer", action_options={"disk_store": {}})
    assert QueueSettings("transfer", actions=["echo"]).actions == ("echo",)  # type: ignore[arg-type]
    assert RedisSettings(url="").url is None


def test_log_dir_resolves_to_the_configured_dir_then_system_dir_then_data_dir(tmp_path: Path) -> None:
    assert LogSettings(dir="/configured").resolved_dir("/data") == "/configured"
    system = tmp_path / "syslog"
    assert LogSettings().resolved_dir("/data", system_dir=str(system)) == str(system)  # creatable
    system.mkdir()
    assert LogSettings().resolved_dir("/data", system_dir=str(system)) == str(system)
    blocked = tmp_path / "file" / "dataq"
    (tmp_path / "file").write_text("")
    assert LogSettings().resolved_dir("/data", system_dir=str(blocked)) == "/data/log"


# --- high availability ---------------------------------------------------------------------------------------


def test_sentinels_name_the_master_and_its_replication_settings(tmp_path: Path) -> None:
    redis = load(tmp_path, """
[redis]
sentinels = ["10.0.0.1:26379", "[fd00::2]:26380", "sentinel-3"]
master_name = "dataq"
sentinel_password = "s3cret"
min_replicas = 1
replica_timeout = 0.5
""").redis
    assert redis.sentinel_hosts == (("10.0.0.1", 26379), ("fd00::2", 26380), ("sentinel-3", 26379))
    assert (redis.master_name, redis.sentinel_password, redis.min_replicas, redis.replica_timeout) == (
        "dataq", "s3cret", 1, 0.5)


def test_sentinels_with_tls_take_the_ca_and_client_certificate_of_rediss_urls(tmp_path: Path) -> None:
    redis = load(tmp_path, """
[redis]
sentinels = ["10.0.0.1:26380"]
master_name = "dataq"
tls = true
ca_file = "/etc/dataq/ca.pem"
cert_file = "/etc/dataq/client.pem"
key_file = "/etc/dataq/client.key"
""").redis
    assert (redis.tls, redis.ca_file, redis.cert_file, redis.key_file) == (
        True, "/etc/dataq/ca.pem", "/etc/dataq/client.pem", "/etc/dataq/client.key")


def test_min_replicas_works_with_a_plain_url(tmp_path: Path) -> None:
    redis = load(tmp_path, '[redis]\nurl = "redis://db:6379/0"\nmin_replicas = 2\n').redis
    assert (redis.url, redis.min_replicas, redis.sentinels) == ("redis://db:6379/0", 2, ())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('sentinels = ["a:1"]\nmaster_name = "m"\nurl = "redis://x:1"',
         "keys 'redis.sentinels' and 'redis.url' exclude each other"),
        ('sentinels = ["a:1"]', "key 'redis.master_name' must be set with 'redis.sentinels'"),
        ('sentinels = ["a:99999"]\nmaster_name = "m"', "'a:99999' has no valid port (1-65535)"),
        ('sentinels = ["::1"]\nmaster_name = "m"', "write an IPv6 address as [address]:port"),
        ('master_name = "m"', "key 'redis.master_name' needs 'redis.sentinels'"),
        ('sentinel_password = "p"', "key 'redis.sentinel_password' needs 'redis.sentinels'"),
        ("min_replicas = 1", "key 'redis.min_replicas' needs replicas: set 'redis.url' or 'redis.sentinels'"),
        ('url = "redis://x:1"\nmin_replicas = -1', "key 'redis.min_replicas' must be at least 0"),
        ('url = "redis://x:1"\nreplica_timeout = 0', "key 'redis.replica_timeout' must be greater than 0"),
        ('url = "redis://x:1"\ntls = true', "key 'redis.tls' is for 'redis.sentinels': with 'redis.url', TLS is a "
                                          "rediss:// URL"),
        ("tls = true", "key 'redis.tls' is for 'redis.sentinels'"),
        ('sentinels = ["a:1"]\nmaster_name = "m"\nca_file = "/etc/ssl/ca.pem"',
         "key 'redis.ca_file' needs 'redis.tls = true' with sentinels"),
        ('sentinels = ["a:1"]\nmaster_name = "m"\ncert_file = "c.pem"\nkey_file = "c.key"',
         "key 'redis.cert_file' needs 'redis.tls = true' with sentinels"),
    ],
)
def test_high_availability_mistakes_are_named(tmp_path: Path, text: str, message: str) -> None:
    assert message in error_of(tmp_path, f"[redis]\n{text}\n")


def test_a_cluster_is_reached_through_the_url_of_any_of_its_nodes(tmp_path: Path) -> None:
    redis = load(tmp_path, '[redis]\nurl = "redis://10.0.0.1:7000"\ncluster = true\nmin_replicas = 1\n').redis
    assert (redis.url, redis.cluster, redis.min_replicas, redis.embedded) == ("redis://10.0.0.1:7000", True, 1, False)
    assert load(tmp_path, '[redis]\nurl = "rediss://10.0.0.1:7000/0"\ncluster = true\n').redis.cluster


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cluster = true", "key 'redis.cluster' needs 'redis.url', the address of one of the cluster's nodes"),
        ('cluster = true\nsentinels = ["a:1"]\nmaster_name = "m"',
         "keys 'redis.cluster' and 'redis.sentinels' exclude each other"),
        ('cluster = true\nurl = "unix:///run/redis.sock"', "key 'redis.cluster' needs a redis:// or rediss://"),
        ('cluster = true\nurl = "redis://h:7000/2"', "key 'redis.url' names database '2': a Redis Cluster has only"),
        ('cluster = true\nurl = "redis://h:7000?db=1"', "names database '1'"),
        ('cluster = "yes"\nurl = "redis://h:7000"', "key 'redis.cluster' must be a boolean"),
    ],
)
def test_cluster_mistakes_are_named(tmp_path: Path, text: str, message: str) -> None:
    assert message in error_of(tmp_path, f"[redis]\n{text}\n")


def test_a_redis_url_override_conflicts_with_configured_sentinels(tmp_path: Path) -> None:
    text = '[redis]\nsentinels = ["a:1"]\nmaster_name = "m"\n'
    assert "exclude each other" in error_of(tmp_path, text, DATAQ_REDIS_URL="redis://x:1")


@pytest.mark.parametrize(("max_memory", "resume_memory", "maxmemory", "limits"), [
    (None, None, 1000, None),
    (0.5, None, 1000, (500, 450)),
    (0.5, 0.25, 1000, (500, 250)),
    (0.5, None, 0, None),  # a fraction of no maxmemory: nothing to watch
    (2e9, None, 0, (2_000_000_000, 1_800_000_000)),
    (2e9, 1e9, 64, (2_000_000_000, 1_000_000_000)),
])
def test_max_memory_is_a_fraction_of_maxmemory_up_to_1_and_bytes_above(
        max_memory: float | None, resume_memory: float | None, maxmemory: int,
        limits: tuple[int, int] | None) -> None:
    push = PushSettings(max_memory=max_memory, resume_memory=resume_memory)
    assert push.memory_limits(maxmemory) == limits


def test_the_memory_watermark_is_off_by_default_and_reads_fractions_or_bytes_from_the_file(tmp_path: Path) -> None:
    default = load_settings(environ=ENV).push
    assert (default.max_memory, default.resume_memory, default.memory_limits(2**30)) == (None, None, None)
    fraction = load(tmp_path, "[push]\nmax_memory = 0.8\n").push
    assert fraction.memory_limits(1000) == (800, 720)  # resume_memory: nine tenths of max_memory
    in_bytes = load(tmp_path, "[push]\nmax_memory = 4_000_000_000\nresume_memory = 3_000_000_000\n").push
    assert in_bytes.memory_limits(0) == (4_000_000_000, 3_000_000_000)
    assert error_of(tmp_path, "[push]\nmax_memory = 0.8\nresume_memory = 700_000_000\n") == (
        f"{tmp_path / 'dataq.toml'}: key 'push.resume_memory' (7e+08) and 'push.max_memory' (0.8) must both be "
        "fractions of maxmemory (at most 1) or both bytes")
