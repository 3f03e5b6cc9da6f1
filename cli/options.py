"""Options shared by every command, and turning settings errors into one line for a person."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from dataq.config import Settings, load_settings
from dataq.errors import DataqError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_UNAVAILABLE = 4
EXIT_INTERRUPTED = 130
"""Interrupted by Ctrl-C: the status a shell reports for a process killed by SIGINT."""


def config_option(func: F) -> F:
    """``--config FILE`` (or ``DATAQ_CONFIG``)."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="Settings file (TOML). Default: $DATAQ_CONFIG, else built-in defaults.",
    )(func)


def queue_option(func: F) -> F:
    return click.option(
        "--queue", "-q", "queue_name", default=None, help="Queue name (default: the first configured)."
    )(func)


def load_or_exit(config_path: str | None) -> Settings:
    """Load settings, or print the one-line reason and exit with the configuration status."""
    try:
        return load_settings(config_path)
    except DataqError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_CONFIG) from exc
