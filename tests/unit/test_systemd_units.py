"""The systemd units: the directives the daemons rely on, and agreement with the settings and the CLI.

``make check-systemd`` has systemd itself verify the files; these tests pin what dataq needs from them.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dataq.config import PopSettings, load_settings

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
CONFIG = Path(__file__).resolve().parents[2] / "config" / "dataq.toml"
DAEMONS = ("dataq-push@.service", "dataq-pop@.service", "dataq-redis.service")
HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
    "PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes", "RestrictNamespaces": "yes", "LockPersonality": "yes", "CapabilityBoundingSet": "",
}

Unit = dict[str, dict[str, list[str]]]


def parse(name: str) -> Unit:
    """Section -> key -> every value given (systemd allows a key more than once)."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for raw in (SYSTEMD / name).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = unit.setdefault(line.strip("[]"), {})
            continue
        assert section is not None, f"{name}: {line!r} before any section"
        key, _, value = line.partition("=")
        section.setdefault(key, []).append(value)
    return unit


def one(unit: Unit, section: str, key: str) -> str:
    values = unit[section].get(key)
    assert values is not None, f"[{section}] {key}= missing"
    return values[-1]


@pytest.mark.parametrize("name", DAEMONS)
def test_every_daemon_notifies_systemd_restarts_on_failure_and_runs_as_dataq(name: str) -> None:
    unit = parse(name)
    expected = {"Type": "notify", "NotifyAccess": "main", "Restart": "on-failure", "User": "dataq",
                "Group": "dataq", "StateDirectory": "dataq", "LogsDirectory": "dataq", "KillMode": "mixed"}
    assert {key: one(unit, "Service", key) for key in expected} == expected
    assert int(one(unit, "Service", "WatchdogSec")) > 0
    assert one(unit, "Unit", "OnFailure") == "dataq-notify-failure@%N.service"
    assert one(unit, "Unit", "PartOf") == "dataq.target"


@pytest.mark.parametrize("name", [*DAEMONS, "dataq-notify-failure@.service", "dataq-web.service", "dataq.service"])
def test_every_service_is_hardened(name: str) -> None:
    unit = parse(name)
    assert {key: one(unit, "Service", key) for key in HARDENING} == HARDENING
    assert "@system-service" in unit["Service"]["SystemCallFilter"]
    assert "AF_UNIX" in one(unit, "Service", "RestrictAddressFamilies").split()


@pytest.mark.parametrize("role", ["push", "pop"])
def test_queue_daemons_are_templates_whose_instance_is_the_queue(role: str) -> None:
    unit = parse(f"dataq-{role}@.service")
    assert shlex.split(one(unit, "Service", "ExecStart")) == [
        "/usr/local/bin/dataq", role, "--config", "/etc/dataq/dataq.toml", "--queue", "%I"]  # %I: unescaped
    assert one(unit, "Install", "WantedBy") == "dataq.target"
    assert {"dataq-redis.service", "dataq.service"} <= set(one(unit, "Unit", "After").split())
    assert shlex.split(one(unit, "Service", "ExecCondition")) == [
        "/usr/local/bin/dataq", "units", "--config", "/etc/dataq/dataq.toml", "--has", f"{role}:%I"]


def test_the_pop_daemon_gets_more_time_to_stop_than_its_grace_period_and_redis_wait() -> None:
    stop_timeout = float(one(parse("dataq-pop@.service"), "Service", "TimeoutStopSec"))
    assert stop_timeout > PopSettings().grace_period + PopSettings().shutdown_redis_wait


def test_systemctl_start_dataq_starts_the_target_and_stopping_it_stops_the_suite() -> None:
    handle, target = parse("dataq.service"), parse("dataq.target")
    assert one(handle, "Unit", "Wants").split() == ["dataq.target", "dataq-redis.service"]
    assert one(handle, "Unit", "Before").split() == ["dataq.target", "dataq-redis.service"]  # it stops last
    assert shlex.split(one(handle, "Service", "ExecStart"))[1:] == ["units", "--config", "/etc/dataq/dataq.toml"]
    assert one(handle, "Install", "WantedBy") == "multi-user.target"
    assert one(target, "Unit", "PartOf") == "dataq.service"
    assert "dataq-redis.service" in one(target, "Unit", "Wants").split()


def test_the_generator_runs_dataq_units_on_the_system_settings() -> None:
    lines = (SYSTEMD / "dataq-generator").read_text().splitlines()
    assert lines[0] == "#!/bin/sh"
    assert lines[-1] == 'exec /usr/local/bin/dataq units --config /etc/dataq/dataq.toml "$@"'
    assert (SYSTEMD / "dataq-generator").stat().st_mode & 0o111


def test_the_failure_hook_is_a_oneshot_mailing_about_its_instance() -> None:
    unit = parse("dataq-notify-failure@.service")
    assert one(unit, "Service", "Type") == "oneshot"
    assert shlex.split(one(unit, "Service", "ExecStart"))[1:] == [
        "notify-crash", "--config", "/etc/dataq/dataq.toml", "%i"]
    assert "Install" not in unit  # started by OnFailure= only


def test_the_dedicated_user_lives_where_the_units_and_the_example_settings_keep_the_data() -> None:
    entries = [line.split() for line in (SYSTEMD / "dataq.sysusers").read_text().splitlines()
               if line and not line.startswith("#")]
    assert [(e[0], e[1], e[-1]) for e in entries] == [("u", "dataq", "/var/lib/dataq")]
    assert load_settings(CONFIG, environ={}).data_dir == "/var/lib/dataq"  # StateDirectory=dataq


def test_every_dataq_command_a_unit_runs_exists() -> None:
    from dataq.cli.main import main

    used = {shlex.split(one(parse(name), "Service", "ExecStart"))[1]
            for name in (*DAEMONS, "dataq-notify-failure@.service", "dataq-web.service", "dataq.service")}
    assert used <= set(main.commands), f"missing: {sorted(used - set(main.commands))}"


def test_the_web_console_runs_with_the_suite_as_dataq_and_restarts_on_failure() -> None:
    unit = parse("dataq-web.service")
    assert shlex.split(one(unit, "Service", "ExecStart")) == [
        "/usr/local/bin/dataq", "web", "--config", "/etc/dataq/dataq.toml"]
    expected = {"Restart": "on-failure", "User": "dataq", "Group": "dataq", "StateDirectory": "dataq"}
    assert {key: one(unit, "Service", key) for key in expected} == expected
    assert shlex.split(one(unit, "Service", "ExecCondition"))[1:] == [
        "units", "--config", "/etc/dataq/dataq.toml", "--has", "web"]
    assert one(unit, "Install", "WantedBy") == "dataq.target"
    assert one(unit, "Unit", "PartOf") == "dataq.target"
    assert "dataq-redis.service" in one(unit, "Unit", "After").split()
