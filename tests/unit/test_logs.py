"""Logging set-up: JSON lines in the file, console or JSON on stderr, context on every line."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog

from dataq.errors import ConfigError
from dataq.logs import HANDLER_NAME_PREFIX, configure_logging, get_logger


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    for handler in our_handlers():
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def our_handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if (h.get_name() or "").startswith(HANDLER_NAME_PREFIX)]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line]


def test_json_file_lines_carry_event_level_timestamp_and_bound_context(tmp_path: Path) -> None:
    configure_logging(component="push", log_dir=tmp_path, fmt="json")
    structlog.contextvars.bind_contextvars(queue="transfer")
    get_logger(record_id="abc").info("record pushed", size=3)

    [line] = json_lines((tmp_path / "push.log").read_text())
    assert line["event"] == "record pushed"
    assert line["level"] == "info"
    assert line["component"] == "push"
    assert (line["queue"], line["record_id"], line["size"]) == ("transfer", "abc", 3)
    assert line["timestamp"].endswith("Z")
    assert datetime.fromisoformat(line["timestamp"]).utcoffset() == timedelta(0)


def test_records_of_stdlib_loggers_get_the_same_shape(tmp_path: Path) -> None:
    configure_logging(component="pop", log_dir=tmp_path, fmt="json")
    structlog.contextvars.bind_contextvars(queue="transfer")
    logging.getLogger("redis.connection").warning("lost %s", "connection")

    [line] = json_lines((tmp_path / "pop.log").read_text())
    assert line["event"] == "lost connection"
    assert line["level"] == "warning"
    assert line["logger"] == "redis.connection"
    assert line["queue"] == "transfer"
    assert "timestamp" in line


def test_exceptions_are_rendered_into_the_json_line(tmp_path: Path) -> None:
    configure_logging(component="pop", log_dir=tmp_path, fmt="json")
    try:
        raise ValueError("bad record")
    except ValueError:
        get_logger().exception("action failed")

    [line] = json_lines((tmp_path / "pop.log").read_text())
    assert line["level"] == "error"
    assert "ValueError: bad record" in line["exception"]


def test_reconfiguring_does_not_duplicate_handlers(tmp_path: Path) -> None:
    configure_logging(component="push", log_dir=tmp_path, fmt="json")
    configure_logging(component="push", log_dir=tmp_path, fmt="json")
    assert len(our_handlers()) == 2
    get_logger().info("once")
    assert len(json_lines((tmp_path / "push.log").read_text())) == 1

    configure_logging(component="push", fmt="json")
    assert len(our_handlers()) == 1


def test_a_logger_made_before_configuration_follows_it(tmp_path: Path) -> None:
    log = get_logger(worker="w1")
    configure_logging(component="sweeper", log_dir=tmp_path, fmt="json")
    log.info("sweep")
    [line] = json_lines((tmp_path / "sweeper.log").read_text())
    assert (line["event"], line["worker"], line["component"]) == ("sweep", "w1", "sweeper")


def test_stderr_gets_json_lines_when_it_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(component="push")
    get_logger(queue="transfer").info("listening", port=7000)
    [line] = json_lines(capsys.readouterr().err)
    assert (line["event"], line["queue"], line["port"]) == ("listening", "transfer", 7000)


def test_stderr_is_human_readable_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = TtyStream()
    monkeypatch.setattr(sys, "stderr", terminal)
    configure_logging(component="push")
    get_logger(queue="transfer").info("listening")
    text = terminal.getvalue()
    assert "listening" in text and "transfer" in text
    assert "\x1b[" in text  # colours, on a terminal only
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_console_format_can_be_forced_without_colours(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(component="push", fmt="console")
    get_logger().info("listening", port=7000)
    err = capsys.readouterr().err
    assert "listening" in err and "port=7000" in err
    assert "\x1b[" not in err


def test_level_filters_lower_events(tmp_path: Path) -> None:
    configure_logging(component="push", level="WARNING", log_dir=tmp_path, fmt="json")
    log = get_logger()
    log.info("hidden")
    log.warning("shown")
    assert [line["event"] for line in json_lines((tmp_path / "push.log").read_text())] == ["shown"]


def test_debug_events_follow_the_level_current_when_they_are_logged(tmp_path: Path) -> None:
    log = get_logger(worker="w1")
    configure_logging(component="pop", level="info", log_dir=tmp_path, fmt="json")
    log.debug("hidden", id="a")
    configure_logging(component="pop", level="debug", log_dir=tmp_path, fmt="json")
    log.debug("shown", id="b")
    [line] = json_lines((tmp_path / "pop.log").read_text())
    assert (line["event"], line["id"], line["worker"]) == ("shown", "b", "w1")
    assert line["logger"] == __name__, "a logger is named for the module that made it"


def test_an_unusable_log_dir_warns_on_stderr_and_keeps_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    configure_logging(component="push", log_dir=blocker / "log", fmt="json")
    get_logger().info("still logging")
    warning, line = json_lines(capsys.readouterr().err)
    assert warning["level"] == "warning"
    assert warning["path"] == str(blocker / "log" / "push.log")
    assert line["event"] == "still logging"
    assert len(our_handlers()) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": "loud"}, "log level must be one of"),
        ({"fmt": "xml"}, "log format must be one of"),
        ({"component": "../etc"}, "log component"),
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        configure_logging(**{"component": "push", **kwargs})
    assert our_handlers() == []
