"""``dataq archive ls|stats``: read the catalog that the ``archive_ingest`` action writes, with Spark SQL.

The catalog comes from the queue's ``archive_ingest`` options (``--config``, ``--queue``) or ``--catalog DIR``.
Queries run on a local Spark master unless ``--master`` says otherwise: the catalog is a directory this machine
reads, and a cluster would only add an application's start-up to a small query.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from dataq.cli.options import EXIT_CONFIG, EXIT_FAILURE, config_option, load_or_exit, queue_option
from dataq.config import Settings
from dataq.errors import ConfigError, DataqError

if TYPE_CHECKING:
    from dataq.actions.archive.ingest import ArchiveIngestOptions

F = TypeVar("F", bound=Callable[..., Any])
CLI_MASTER = "local[*]"
"""Master of the CLI's queries unless ``--master`` is given."""
DAY = click.DateTime(formats=["%Y-%m-%d"])


def _catalog_options(func: F) -> F:
    for option in reversed((
        config_option,
        queue_option,
        click.option("--catalog", "catalog_dir", type=click.Path(file_okay=False), default=None,
                     help="The catalog directory (default: the queue's archive_ingest catalog)."),
        click.option("--master", default=CLI_MASTER, show_default=True, help="Spark master for the query."),
        click.option("--json", "as_json", is_flag=True, help="One JSON object per row per line, for scripts."),
    )):
        func = option(func)
    return func


@click.group()
def archive() -> None:
    """Query the archive catalog (the Parquet table archive_ingest appends to)."""


@archive.command("ls")
@_catalog_options
@click.option("--date", type=DAY, default=None, help="Ingest date (UTC), YYYY-MM-DD.")
@click.option("--obs-date", type=DAY, default=None, help="Observation date (DATE-OBS), YYYY-MM-DD.")
@click.option("--instrument", default=None, help="INSTRUME, case-insensitive.")
@click.option("--checksum", default=None, help="One file's checksum.")
@click.option("--fits-errors", is_flag=True, help="Only files whose FITS header could not be read in full.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="Most rows shown.")
def ls(config_path: str | None, queue_name: str | None, catalog_dir: str | None, master: str, as_json: bool,
       date: dt.datetime | None, obs_date: dt.datetime | None, instrument: str | None, checksum: str | None,
       fits_errors: bool, limit: int) -> None:
    """List catalog rows, newest ingest first."""
    from dataq.actions.archive import catalog

    rows = _query(config_path, queue_name, catalog_dir, master, lambda spark, path: catalog.list_rows(
        spark, path, date=date.date() if date else None, obs_date=obs_date.date().isoformat() if obs_date else None,
        instrument=instrument, checksum=checksum, fits_errors=fits_errors, limit=limit))
    _print(rows, catalog.LS_COLUMNS, as_json)


@archive.command()
@_catalog_options
@click.option("--by-instrument", is_flag=True, help="Count per ingest day and instrument.")
def stats(config_path: str | None, queue_name: str | None, catalog_dir: str | None, master: str, as_json: bool,
          by_instrument: bool) -> None:
    """Files, bytes and FITS files per ingest day."""
    from dataq.actions.archive import catalog

    rows = _query(config_path, queue_name, catalog_dir, master,
                  lambda spark, path: catalog.stats(spark, path, by_instrument=by_instrument))
    columns = ("ingest_date", *(("instrument",) if by_instrument else ()), "files", "bytes", "fits_files",
               "fits_errors")
    _print(rows, columns, as_json)


def _query(config_path: str | None, queue_name: str | None, catalog_dir: str | None, master: str,
           query: Callable[[Any, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    from dataq.actions.archive.ingest import ArchiveIngestOptions

    try:
        if catalog_dir is not None:
            options = ArchiveIngestOptions(archive_root="/", catalog=os.path.abspath(catalog_dir), master=master)
        else:
            options = replace(find_options(load_or_exit(config_path), queue_name), master=master)
        with catalog_session(options) as spark:
            return query(spark, options.catalog_path)
    except ConfigError as exc:
        _fail(str(exc), EXIT_CONFIG)
    except DataqError as exc:
        _fail(str(exc), EXIT_FAILURE)
    except Exception as exc:  # Spark's errors (an unreadable Parquet file): one line, not a Java stack trace
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        _fail(f"the catalog query failed: {first}", EXIT_FAILURE)


@contextlib.contextmanager
def catalog_session(options: ArchiveIngestOptions) -> Iterator[Any]:
    """The process's shared SparkSession for these options; ConfigError when Spark cannot run here."""
    from dataq.actions.archive.ingest import brief, check_requirements
    from dataq.actions.archive.session import SESSIONS

    check_requirements()
    try:
        spark = SESSIONS.acquire(options.session_spec())
    except Exception as exc:
        raise ConfigError(f"Spark did not start: {brief(exc)}") from exc
    try:
        yield spark
    finally:
        SESSIONS.release()


def find_options(settings: Settings, queue: str | None) -> ArchiveIngestOptions:
    """The ``archive_ingest`` options of a queue (the first configured when None); ConfigError if it has none."""
    from dataq.actions.archive.ingest import ArchiveIngestAction
    from dataq.actions.registry import options_of

    queue_settings = settings.queue(queue)
    options: ArchiveIngestOptions | None = options_of(queue_settings, ArchiveIngestAction, settings.source)
    if options is not None:
        return options
    raise ConfigError(f"queue {queue_settings.name!r} has no archive_ingest action; give --catalog to read a "
                      "catalog directly")


def _fail(message: str, status: int) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(status)


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else value


def _print(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], as_json: bool) -> None:
    if as_json:
        for row in rows:
            click.echo(json.dumps({key: _plain(value) for key, value in row.items()}))
        return
    if not rows:
        click.echo("(no rows)")
        return
    cells = [[("-" if row.get(c) is None else str(_plain(row.get(c)))) for c in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for line in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
