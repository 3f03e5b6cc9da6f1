"""dataq-cli refusing bad input: one line on stderr naming the problem, a documented exit status, nothing half-done."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dataq.cli.console import main
from dataq.cli.options import EXIT_CONFIG, EXIT_FAILURE, EXIT_UNAVAILABLE, EXIT_USAGE
from dataq.embedded.redis_server import free_port
from dataq.record import format_line
from dataq.store import Flag, QueueList
from tests.cli_support import QUEUE, by_switch, ids, on_store, seed, write_config
from tests.helpers import checksum_of, make_records

Cli = Callable[..., Result]


def refused(result: Result, status: int = EXIT_FAILURE) -> str:
    """The single stderr line of a refused call (which must have the given status)."""
    assert result.exit_code == status, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def flags(redis_url: str) -> dict[Flag, bool]:
    return on_store(redis_url, lambda s: s.flags())


# --- range errors --------------------------------------------------------------------------------------------


def test_an_unknown_id_is_refused_and_nothing_moves(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 3)
    before = ids(redis_url, QueueList.ACTIVE)
    line = refused(cli("--advance", checksum_of(99), r[0].checksum))
    assert line == f"Error: id {checksum_of(99)} is not in the active queue (no record has this id)"
    assert ids(redis_url, QueueList.ACTIVE) == before


def test_a_reversed_range_is_refused_and_nothing_moves(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 3)  # listed: r2 r1 r0
    before = ids(redis_url, QueueList.ACTIVE)
    line = refused(cli("--deactivate", r[0].checksum, r[2].checksum))
    assert "reversed range" in line and r[0].checksum in line and r[2].checksum in line
    assert ids(redis_url, QueueList.ACTIVE) == before and ids(redis_url, QueueList.INACTIVE) == []


def test_an_id_in_the_other_list_is_refused_naming_that_list(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 3)
    assert refused(cli("--activate", r[1].checksum, r[1].checksum)) == (
        f"Error: id {r[1].checksum} is not in the inactive queue (it is in the active queue)"
    )
    on_store(redis_url, lambda s: s.deactivate(r[0].checksum, r[0].checksum))
    line = refused(cli("--delete", "active", r[0].checksum, r[0].checksum))
    assert line.endswith("(it is in the inactive queue)")
    assert ids(redis_url, QueueList.INACTIVE) == [r[0].checksum]


def test_a_failing_step_stops_the_call_keeping_the_steps_before_it(cli: Cli, redis_url: str) -> None:
    seed(redis_url, 2)
    result = cli("--list", "active", "--advance", checksum_of(7), checksum_of(7), "--action", "off", "--summary")
    refused(result)
    assert result.stdout == "Turned action off (it was on)\n"  # no listing, no summary
    assert flags(redis_url)[Flag.ACTION] is False


# --- record and file errors ----------------------------------------------------------------------------------


def test_a_malformed_load_line_names_file_and_line_and_keeps_the_records_before_it(
    cli: Cli, redis_url: str, tmp_path: Path
) -> None:
    records = make_records(20)
    lines = [format_line(r) for r in records]
    lines[16] = "/data/bad.fits not-a-checksum 12"
    path = tmp_path / "records.txt"
    path.write_text("\n".join(lines) + "\n")
    line = refused(cli("--load", str(path), "--summary"))
    assert line.startswith(f"Error: {path} line 17: checksum 'not-a-checksum' does not match")
    assert line.endswith("; 16 records loaded before it")
    assert set(ids(redis_url, QueueList.ACTIVE)) == {r.checksum for r in records[:16]}


def test_a_malformed_load_line_reports_duplicates_loaded_before_it(cli: Cli, redis_url: str, tmp_path: Path) -> None:
    seed(redis_url, 2)
    records = make_records(4)
    path = tmp_path / "records.txt"
    path.write_text("".join(format_line(r) + "\n" for r in records) + "relative/path " + checksum_of(9) + " 1\n")
    result = cli("--load", str(path))
    assert result.exit_code == EXIT_FAILURE
    assert result.stderr.splitlines()[-1].endswith("; 2 records loaded before it (2 duplicates ignored)")
    assert "is not absolute" in result.stderr


def test_a_malformed_pushstr_is_refused_before_any_step_runs(cli: Cli, redis_url: str) -> None:
    line = refused(cli("--action", "off", "--pushstr", "/data/x.fits 123 10"))
    assert line.startswith("Error: --pushstr '/data/x.fits 123 10': checksum '123' does not match")
    assert flags(redis_url)[Flag.ACTION] is True


def test_a_missing_pushfile_or_load_file_is_refused_before_any_step_runs(
    cli: Cli, redis_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.fits"
    assert refused(cli("-a", "off", "--pushfile", str(missing))).startswith(f"Error: cannot read {missing}: ")
    assert refused(cli("-a", "off", "--load", str(missing))) == f"Error: cannot read {missing}: no such file"
    assert flags(redis_url)[Flag.ACTION] is True


def test_a_dump_into_a_missing_directory_is_refused_before_any_step_runs(
    cli: Cli, redis_url: str, tmp_path: Path
) -> None:
    target = tmp_path / "nowhere" / "dump.txt"
    line = refused(cli("-a", "off", "--dump", str(target)))
    assert line == f"Error: cannot write {target}: {target.parent} is not a writable directory"
    assert flags(redis_url)[Flag.ACTION] is True


# --- Redis unavailable ---------------------------------------------------------------------------------------


def test_an_unreachable_configured_redis_exits_with_the_unavailable_status(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, ["--config", str(write_config(tmp_path, url)), "--summary"])
    line = refused(result, EXIT_UNAVAILABLE)
    assert line.startswith(f"Error: Redis is unavailable at {url} (from the settings file {tmp_path}/")
    assert "dataq run" not in line


def test_an_embedded_redis_that_is_not_running_points_at_dataq_run(tmp_path: Path) -> None:
    config_file = tmp_path / "dataq.toml"
    config_file.write_text(f'data_dir = "{tmp_path / "d"}"\n')
    line = refused(CliRunner().invoke(main, ["--config", str(config_file), "-l", "active"]), EXIT_UNAVAILABLE)
    assert line.startswith(f"Error: Redis is unavailable at unix://{tmp_path / 'd' / 'redis.sock'} "
                           f"(from the settings file {config_file}): ")
    assert line.endswith("; is `dataq run` running?")


def test_an_unreachable_redis_of_the_built_in_settings_says_no_settings_file_was_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATAQ_CONFIG", "")
    monkeypatch.setenv("DATAQ_REDIS_URL", "")  # set and empty: the embedded server, as the settings say
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    line = refused(CliRunner().invoke(main, ["--summary"]), EXIT_UNAVAILABLE)
    assert line.startswith(f"Error: Redis is unavailable at unix://{tmp_path / 'dataq' / 'redis.sock'} (from the "
                           "built-in settings (no --config, $DATAQ_CONFIG or /etc/dataq/dataq.toml)): ")


def test_an_unreachable_redis_named_by_dataq_redis_url_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    monkeypatch.setenv("DATAQ_REDIS_URL", url)
    line = refused(CliRunner().invoke(main, ["--summary"]), EXIT_UNAVAILABLE)
    assert line.startswith(f"Error: Redis is unavailable at {url} (from $DATAQ_REDIS_URL): ")


def test_redis_option_overrides_the_configured_url(cli: Cli) -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    line = refused(cli("--redis", url, "--info"), EXIT_UNAVAILABLE)
    assert line.startswith(f"Error: Redis is unavailable at {url}: ")  # the option's URL: no settings file named


def test_health_reports_an_unreachable_redis_as_unhealthy(tmp_path: Path) -> None:
    config_file = write_config(tmp_path, f"redis://127.0.0.1:{free_port()}")
    result = CliRunner().invoke(main, ["--config", str(config_file), "--health", "--json"])
    assert result.exit_code == EXIT_FAILURE
    doc = by_switch(result.stdout)["health"]
    assert doc["healthy"] is False and doc["reason"].startswith("Redis is unavailable at redis://127.0.0.1:")


# --- configuration and usage ---------------------------------------------------------------------------------


def test_an_invalid_settings_file_exits_with_the_configuration_status(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[redis]\nurll = 'redis://x'\n")
    line = refused(CliRunner().invoke(main, ["--config", str(bad), "-s"]), EXIT_CONFIG)
    assert "unknown key 'redis.urll'" in line


def test_an_unknown_queue_exits_with_the_configuration_status(cli: Cli) -> None:
    line = refused(cli("--queue", "nosuch", "-s"), EXIT_CONFIG)
    assert "unknown queue 'nosuch'; the queues configured in" in line and QUEUE in line


def test_an_invalid_redis_url_exits_with_the_configuration_status(cli: Cli) -> None:
    assert "must start with redis://" in refused(cli("--redis", "http://x", "-s"), EXIT_CONFIG)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to do"),
        (("--limit", "3"), "--limit and --offset page --list"),
        (("--list", "everything"), "Invalid value for '-l' / '--list'"),
        (("--action", "maybe"), "Invalid value for '-a' / '--action'"),
        (("--advance", "only-one"), "Option '--advance' requires 2 arguments"),
        (("--delete", "stash", "a", "b"), "Invalid value for '--delete'"),
        (("--events", "many"), "Invalid value for '--events'"),
    ],
)
def test_usage_errors_exit_with_the_usage_status(cli: Cli, args: tuple[str, ...], message: str) -> None:
    result = cli(*args)
    assert result.exit_code == EXIT_USAGE
    assert message in result.stderr
