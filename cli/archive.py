"""``dataq archive ls|stats``: read the catalog that the ``archive_ingest`` action writes, with Spark SQL.

The catalog comes from the queue's ``archive_ingest`` options (``--config``, ``--queue``) or ``--catalog DIR``.
Queries run on a local Spark master unless ``--master`` says otherwise: the catalog is a directory this machine
reads, and a cluster would only add an application's start-up to a small query.
"""

from __future__ import annotations

import asyncio
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
from dataq.errors import ConfigError, DataqError, StoreUnavailable

if TYPE_CHECKING:
    from dataq.actions.archive.compaction import Compacted
    from dataq.actions.archive.ingest import ArchiveIngestOptions

F = TypeVar("F", bound=Callable[..., Any])
CLI_MASTER = "local[*]"
"""Master of the CLI's queries unless ``--master`` is given."""
DAY = click.DateTime(formats=["%Y-%m-%d"])
INSTANT = click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f",
                                  "%Y-%m-%dT%H:%M"])


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
    """Query and compact the archive catalog (the Parquet table archive_ingest appends to)."""


@archive.command("ls")
@_catalog_options
@click.option("--date", type=DAY, default=None, help="Ingest date (UTC), YYYY-MM-DD.")
@click.option("--obs-date", type=DAY, default=None, help="Observation date (UTC, from DATE-OBS or MJD-OBS).")
@click.option("--since", type=INSTANT, default=None, metavar="TIME",
              help="Observed at or after this UTC time (a date is 00:00).")
@click.option("--until", type=INSTANT, default=None, metavar="TIME",
              help="Observed before this UTC time (YYYY-MM-DD[Thh:mm[:ss]]).")
@click.option("--instrument", default=None, help="INSTRUME, case-insensitive.")
@click.option("--telescope", default=None, help="TELESCOP, case-insensitive.")
@click.option("--object", "object_", default=None, help="Part of OBJECT, case-insensitive.")
@click.option("--checksum", default=None, help="One file's checksum.")
@click.option("--fits-errors", is_flag=True, help="Only files whose FITS header could not be read in full.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="Most rows shown.")
def ls(config_path: str | None, queue_name: str | None, catalog_dir: str | None, master: str, as_json: bool,
       date: dt.datetime | None, obs_date: dt.datetime | None, since: dt.datetime | None, until: dt.datetime | None,
       instrument: str | None, telescope: str | None, object_: str | None, checksum: str | None, fits_errors: bool,
       limit: int) -> None:
    """List catalog rows, newest ingest first."""
    from dataq.actions.archive import catalog

    if since is not None and until is not None and until <= since:
        raise click.BadParameter(f"--until {until:%Y-%m-%dT%H:%M:%S} is not after --since {since:%Y-%m-%dT%H:%M:%S}",
                                 param_hint="--until")
    filters = catalog.Filters(date=date.date() if date else None, obs_date=obs_date.date() if obs_date else None,
                              since=since, until=until, instrument=instrument, telescope=telescope, object=object_,
                              checksum=checksum, fits_errors=fits_errors)
    rows = _query(config_path, queue_name, catalog_dir, master,
                  lambda spark, options: catalog.list_rows(spark, options.catalog_path, filters, limit=limit))
    _print(rows, catalog.LS_COLUMNS, as_json)


@archive.command()
@_catalog_options
@click.option("--by-night", is_flag=True, help="Count per observing night (local noon to noon) instead of per "
                                               "ingest day.")
@click.option("--by-instrument", is_flag=True, help="Count per day (or night) and instrument.")
@click.option("--utc-offset", type=click.FloatRange(-12, 14), default=None,
              help="Hours from UTC of the site's local time, for --by-night (default: the queue's "
                   "night_utc_offset, else 0).")
def stats(config_path: str | None, queue_name: str | None, catalog_dir: str | None, master: str, as_json: bool,
          by_night: bool, by_instrument: bool, utc_offset: float | None) -> None:
    """Files, bytes, FITS files and exposure time per ingest day or observing night."""
    from dataq.actions.archive import catalog

    rows = _query(config_path, queue_name, catalog_dir, master, lambda spark, options: catalog.stats(
        spark, options.catalog_path, by_instrument=by_instrument, by_night=by_night,
        utc_offset=options.night_utc_offset if utc_offset is None else utc_offset))
    columns = ("night" if by_night else "ingest_date", *(("instrument",) if by_instrument else ()), "files", "bytes",
               "fits_files", "fits_errors", "exptime", "first_obs", "last_obs")
    _print(rows, columns, as_json)


@archive.command()
@config_option
@queue_option
@click.option("--date", "dates", type=DAY, multiple=True, help="Ingest date to compact (repeatable; default all).")
@click.option("--grace", type=click.FloatRange(min=0), default=None,
              help="Seconds replaced files stay for readers that listed them (default: the queue's compact_grace; "
                   "0 removes them at once, under queries still reading them).")
@click.option("--master", default=CLI_MASTER, show_default=True, help="Spark master for the rewrite.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per compaction per line, for scripts.")
def compact(config_path: str | None, queue_name: str | None, dates: tuple[dt.datetime, ...], grace: float | None,
            master: str, as_json: bool) -> None:
    """Rewrite partitions' small Parquet files as few large ones, holding the queue's catalog lease (readers never
    see a row twice or miss one). Files replaced more than the grace period ago are removed first."""
    settings = load_or_exit(config_path)
    wanted = sorted({day.date().isoformat() for day in dates}) or None

    def run(spark: Any, options: ArchiveIngestOptions) -> list[dict[str, Any]]:
        done, removed = asyncio.run(_compact(spark, settings, queue_name, options, wanted,
                                             options.compact_grace if grace is None else grace))
        rows = [{"ingest_date": c.date, "files": len(c.replaced), "rows": c.rows, "bytes_before": c.bytes_before,
                 "bytes_after": c.bytes_after, "output": os.path.basename(c.output)} for c in done]
        if not as_json:
            click.echo(f"{len(done)} compaction(s); {removed} replaced file(s) removed after their grace period")
        return rows

    rows = _query(config_path, queue_name, None, master, run, settings=settings, what="the compaction")
    if rows or as_json:
        _print(rows, ("ingest_date", "files", "rows", "bytes_before", "bytes_after", "output"), as_json)


async def _compact(spark: Any, settings: Settings, queue_name: str | None, options: ArchiveIngestOptions,
                   dates: list[str] | None, grace: float) -> tuple[list[Compacted], int]:
    from dataq.actions.archive.compaction import DEFAULT_MIN_FILES, compact
    from dataq.actions.archive.ingest import LEASE_NAME
    from dataq.embedded.locate import resolve_redis
    from dataq.store import QueueStore

    queue = settings.queue(queue_name)
    url = resolve_redis(settings).url
    store = QueueStore.open(settings, url, queue.name)
    try:
        return await compact(spark, options.catalog_path,
                             lambda: store.lease(LEASE_NAME, ttl=options.lease_ttl, wait=queue.action_timeout),
                             dates=dates, target_bytes=options.compact_target_bytes, min_files=DEFAULT_MIN_FILES,
                             grace=grace)
    except StoreUnavailable as exc:
        raise StoreUnavailable(f"dataq archive compact holds the queue's catalog lease in Redis ({url}), which it "
                               f"cannot reach: {exc}") from exc
    finally:
        await store.close()


def _query(config_path: str | None, queue_name: str | None, catalog_dir: str | None, master: str,
           query: Callable[[Any, ArchiveIngestOptions], list[dict[str, Any]]], *,
           settings: Settings | None = None, what: str = "the catalog query") -> list[dict[str, Any]]:
    from dataq.actions.archive.ingest import ArchiveIngestOptions

    try:
        if catalog_dir is not None:
            options = ArchiveIngestOptions(archive_root="/", catalog=os.path.abspath(catalog_dir), master=master)
        else:
            options = replace(find_options(settings or load_or_exit(config_path), queue_name), master=master)
        with catalog_session(options) as spark:
            return query(spark, options)
    except ConfigError as exc:
        _fail(str(exc), EXIT_CONFIG)
    except DataqError as exc:
        _fail(str(exc), EXIT_FAILURE)
    except Exception as exc:  # Spark's errors (an unreadable Parquet file): one line, not a Java stack trace
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        _fail(f"{what} failed: {first}", EXIT_FAILURE)


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
