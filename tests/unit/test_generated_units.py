"""The systemd generator's half in Python (:mod:`dataq.embedded.units`): which units the settings make
``systemctl start dataq`` start, named as systemd names them. The real generator under real systemd is tested in
``tests/e2e/test_systemd.py``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from dataq.cli.main import main
from dataq.config import load_settings
from dataq.embedded.units import (
    AUDIT_TIMER,
    SUITE_UNITS,
    stale_units,
    suite_units,
    template_of,
    write_schedule,
    write_wants,
)
from dataq.runtime.systemd import escape_instance, unescape_instance

SETTINGS = """\
[queues.transfer]
[queues.raw-data]
push_port = 9989
"""


def settings_file(tmp_path: Path, text: str = SETTINGS) -> Path:
    path = tmp_path / "dataq.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["transfer", "raw-data", ".hidden", "a.b_c-1", "x y", "é", "a:b", ":a", "a\\b"])
def test_an_instance_name_is_escaped_as_systemd_escape_does_and_back(name: str) -> None:
    expected = subprocess.run(["systemd-escape", name], capture_output=True, text=True, check=True).stdout.strip()
    assert escape_instance(name) == expected
    assert unescape_instance(expected) == name


def test_the_suite_is_a_push_and_a_pop_daemon_per_queue_and_the_web_console(tmp_path: Path) -> None:
    settings = load_settings(settings_file(tmp_path), environ={})
    assert suite_units(settings) == [
        "dataq-push@transfer.service", "dataq-pop@transfer.service",
        "dataq-push@raw\\x2ddata.service", "dataq-pop@raw\\x2ddata.service", "dataq-web.service"]


def test_a_disabled_web_console_is_not_started(tmp_path: Path) -> None:
    settings = load_settings(settings_file(tmp_path, SETTINGS + "[web]\nenabled = false\n"), environ={})
    assert "dataq-web.service" not in suite_units(settings)


def test_an_instance_is_loaded_from_its_template() -> None:
    assert template_of("dataq-push@raw\\x2ddata.service") == "dataq-push@.service"
    assert template_of("dataq-web.service") == "dataq-web.service"


def test_the_generator_makes_both_suite_units_want_every_daemon(tmp_path: Path) -> None:
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    for template in ("dataq-push@.service", "dataq-pop@.service", "dataq-web.service"):
        (unit_dir / template).touch()
    wanted = ["dataq-push@transfer.service", "dataq-pop@transfer.service", "dataq-web.service"]
    assert write_wants(wanted, tmp_path / "out", unit_dirs=[str(tmp_path / "elsewhere"), str(unit_dir)]) == []
    for suite_unit in SUITE_UNITS:
        links = {link.name: link.readlink() for link in (tmp_path / "out" / f"{suite_unit}.wants").iterdir()}
        assert links == {"dataq-push@transfer.service": unit_dir / "dataq-push@.service",
                         "dataq-pop@transfer.service": unit_dir / "dataq-pop@.service",
                         "dataq-web.service": unit_dir / "dataq-web.service"}
    assert write_wants(wanted, tmp_path / "out", unit_dirs=[str(unit_dir)]) == []  # again, at the next reload


def test_a_daemon_whose_unit_file_is_not_installed_is_named_and_left_out(tmp_path: Path) -> None:
    problems = write_wants(["dataq-push@transfer.service"], tmp_path / "out", unit_dirs=[str(tmp_path)])
    assert problems == [f"dataq-push@.service is in none of {tmp_path}: dataq-push@transfer.service is not "
                        "started (make install-systemd installs it)"]
    assert list((tmp_path / "out" / "dataq.service.wants").iterdir()) == []


def test_settings_changed_since_the_last_reload_are_stale(tmp_path: Path) -> None:
    (tmp_path / "dataq.service.wants").mkdir()
    (tmp_path / "dataq.service.wants" / "dataq-push@old.service").symlink_to("/dev/null")
    assert stale_units(["dataq-push@old.service"], tmp_path) == []
    assert stale_units(["dataq-push@new.service"], tmp_path) == ["dataq-push@new.service", "dataq-push@old.service"]
    assert stale_units(["dataq-push@new.service"], tmp_path / "no-systemd") == []


def test_dataq_units_lists_what_systemctl_start_dataq_starts(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["units", "--config", str(settings_file(tmp_path))])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["dataq-redis.service", *suite_units(
        load_settings(settings_file(tmp_path), environ={}))]


def test_dataq_units_fails_on_invalid_settings_naming_the_mistake(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["units", "--config", str(settings_file(tmp_path, "[push]\nprot = 1\n"))])
    assert result.exit_code == 3
    assert "unknown key 'push.prot'" in result.stderr


def test_dataq_units_refuses_two_output_directories(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["units", "--config", str(settings_file(tmp_path)), "a", "b"])
    assert result.exit_code == 2
    assert "give no directory, or a generator's one or three, not 2" in result.stderr


@pytest.mark.parametrize(("daemon", "runs"), [
    ("push:transfer", True), ("pop:raw-data", True), ("web", True), ("redis", True), ("push:removed", False),
    ("push", False)])
def test_dataq_units_has_tells_whether_the_settings_run_a_daemon(tmp_path: Path, daemon: str, runs: bool) -> None:
    result = CliRunner().invoke(main, ["units", "--config", str(settings_file(tmp_path)), "--has", daemon])
    assert result.exit_code == (0 if runs else 1)
    assert result.stdout == ""
    if not runs:
        assert result.stderr == (
            f"{daemon} is not in the settings (settings file {tmp_path / 'dataq.toml'}), which run: redis, "
            "push:transfer, pop:transfer, push:raw-data, pop:raw-data, web; not started\n")


def test_dataq_units_has_fails_on_settings_that_do_not_load_so_no_daemon_starts(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["units", "--config", str(settings_file(tmp_path, "[push]\nprot = 1\n")),
                                       "--has", "push:transfer"])
    assert result.exit_code == 3  # an ExecCondition= failing with 1 to 254 skips the unit


def test_a_generator_run_on_settings_that_do_not_load_leaves_every_daemon_stale(tmp_path: Path) -> None:
    bad = settings_file(tmp_path, "[push]\nprot = 1\n")
    assert CliRunner().invoke(main, ["units", "--config", str(bad), str(tmp_path / "gen")]).exit_code == 3
    assert (tmp_path / "gen" / "dataq.service.wants").is_dir()
    wanted = suite_units(load_settings(settings_file(tmp_path), environ={}))
    assert stale_units(wanted, tmp_path / "gen") == sorted(wanted)



def test_the_audit_timer_is_wanted_when_there_is_something_to_audit(tmp_path: Path) -> None:
    watching = SETTINGS + '[feed]\ndirectories = ["/data/night"]\n'
    storing = SETTINGS + '[queues.archive]\nactions = ["disk_store"]\npush_port = 9990\n' \
                         '[queues.archive.disk_store]\nroot = "/archive"\n'
    for text in (watching, storing, SETTINGS + '[audit]\ndirectories = ["/data/night"]\n'):
        assert suite_units(load_settings(settings_file(tmp_path, text), environ={}))[-1] == AUDIT_TIMER
    nothing = load_settings(settings_file(tmp_path, SETTINGS), environ={})
    assert AUDIT_TIMER not in suite_units(nothing), "no directory and no copies: nothing to audit"
    disabled = load_settings(settings_file(tmp_path, watching + "[audit]\nenabled = false\n"), environ={})
    assert AUDIT_TIMER not in suite_units(disabled)
    copies_off = load_settings(settings_file(tmp_path, storing + "[audit]\ncopies = false\n"), environ={})
    assert AUDIT_TIMER not in suite_units(copies_off)


def test_the_generator_writes_audit_when_into_the_timers_drop_in(tmp_path: Path) -> None:
    settings = load_settings(settings_file(tmp_path, SETTINGS + '[audit]\nwhen = "Mon *-*-* 04:00"\n'), environ={})
    write_schedule(settings, tmp_path / "out")
    drop_in = (tmp_path / "out" / f"{AUDIT_TIMER}.d" / "50-when.conf").read_text()
    assert drop_in.splitlines()[1:] == ["[Timer]", "OnCalendar=", "OnCalendar=Mon *-*-* 04:00"]
    verified = subprocess.run(["systemd-analyze", "calendar", "Mon *-*-* 04:00"], capture_output=True, check=False)
    assert verified.returncode == 0, "the value the drop-in holds is one systemd reads"
