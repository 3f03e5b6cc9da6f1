"""Options shared by every command, and turning settings errors into one line for a person."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from dataq.config import SYSTEM_CONFIG, Settings, load_settings
from dataq.errors import ConfigError, DataqError, InvalidRecord
from dataq.logs import LOG_LEVELS, configure_logging
from dataq.record import RecordRules
from dataq.runtime.loop import run_daemon

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_UNAVAILABLE = 4
EXIT_INTERRUPTED = 130
"""Interrupted by Ctrl-C: the status a shell reports for a process killed by SIGINT."""
LEGACY_LOG_LEVELS = {"CRITICAL": "error", **{level.upper(): level for level in reversed(LOG_LEVELS)}}
"""The 2014 data-q's ``--loglevel`` values -> dataq's levels. dataq logs nothing above error, so CRITICAL is
error (other libraries' critical records pass either way)."""


def config_option(func: F) -> F:
    """``--config FILE`` (or ``DATAQ_CONFIG``); ``--cfg FILE`` is its 2014 name."""
    return click.option(
        "--config",
        "--cfg",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help=f"Settings file (TOML). Default: $DATAQ_CONFIG, else {SYSTEM_CONFIG} if it exists, else built-in "
             "defaults.",
    )(func)


def loglevel_option(help: str) -> Callable[[F], F]:
    """``--loglevel LEVEL``: the 2014 switch, any case; the command gets one of dataq's LOG_LEVELS, or None."""
    return click.option(
        "--loglevel",
        type=click.Choice(tuple(LEGACY_LOG_LEVELS), case_sensitive=False),
        metavar=f"[{'|'.join(LEGACY_LOG_LEVELS)}]",
        default=None,
        callback=lambda _ctx, _param, value: None if value is None else LEGACY_LOG_LEVELS[value.upper()],
        help=f"{help} Any case; CRITICAL counts as ERROR (dataq logs nothing above it).",
    )


def queue_option(func: F) -> F:
    return click.option(
        "--queue", "-q", "queue_name", default=None, help="Queue name (default: the first configured)."
    )(func)


def checked_activity(activity: str | None, rules: RecordRules) -> str | None:
    """The switch ``--activity``, if the queue defines it (a usage error listing its activities otherwise)."""
    if activity is None:
        return None
    try:
        return rules.check_activity(activity, None)
    except InvalidRecord as exc:
        raise click.UsageError(f"--activity: {exc}") from exc


def load_or_exit(config_path: str | None) -> Settings:
    """Load settings, or print the one-line reason and exit with the configuration status."""
    try:
        return load_settings(config_path)
    except DataqError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_CONFIG) from exc


def daemon_logging(settings: Settings, component: str) -> None:
    """A daemon's logging: to stderr, and to ``<component>.log`` in the settings' log directory."""
    configure_logging(
        component=component,
        level=settings.log.level,
        log_dir=settings.log.resolved_dir(settings.data_dir),
        fmt=settings.log.format,
    )


def run_command(coro: Coroutine[Any, Any, int]) -> None:
    """Run a command's coroutine to its exit status; a DataqError is one line on stderr (status 3 for settings)."""
    try:
        status = run_daemon(coro)
    except ConfigError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_CONFIG) from exc
    except DataqError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_FAILURE) from exc
    raise SystemExit(status or 0)
