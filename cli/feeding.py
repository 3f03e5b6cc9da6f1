"""``dataq feed``: send records to push daemons, from a file, a directory scan, or a watched directory, directly
or through a spool; and ``--status`` / ``--retry-refused`` of spools."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from dataq.cli.options import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    checked_activity,
    config_option,
    daemon_logging,
    load_or_exit,
    queue_option,
    run_command,
)
from dataq.config import MAX_PORT, Settings
from dataq.config.feed_settings import parse_target
from dataq.errors import ConfigError, DataqError
from dataq.feed.client import Target

if TYPE_CHECKING:
    from dataq.feed.spool_status import SpoolStatus

WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
"""A push daemon listening on every address is reached on loopback."""
POSITIVE_SECONDS = click.FloatRange(min=0, min_open=True)


@click.command()
@config_option
@queue_option
@click.option("--host", default=None, help="Push daemon host (default: from the settings).")
@click.option("--port", type=click.IntRange(1, MAX_PORT), default=None, help="Push daemon port (default: settings).")
@click.option("--target", "targets", metavar="HOST:PORT", multiple=True,
              help="A push daemon to send to; repeat it for fail-over, tried in order ([feed] targets).")
@click.option("--scan", "scan_dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Scan this directory tree and push every file, computing checksums.")
@click.option("--watch", "watch_dir", type=click.Path(file_okay=False), default=None,
              help="Watch this directory and push each file once it is complete, until stopped (uses a spool).")
@click.option("--recursive", is_flag=True, default=None, help="With --watch: its subdirectories too.")
@click.option("--include", multiple=True, metavar="GLOB", help="With --watch: feed only files matching a GLOB.")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="With --watch: skip files matching GLOB (besides .*, *.tmp, *.part, *~).")
@click.option("--poll", type=POSITIVE_SECONDS, default=None, metavar="SECONDS",
              help="With --watch: list the directory every SECONDS instead of inotify (network file systems).")
@click.option("--settle", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="With --watch: a file found by a scan is fed once unchanged for SECONDS.")
@click.option("--spool", "spool_dir", type=click.Path(file_okay=False), default=None,
              help="Keep records in this spool directory until answered, and never give up.")
@click.option("--retry-for", type=POSITIVE_SECONDS, default=None, metavar="SECONDS",
              help="Without a spool: give up after SECONDS of failing to reach the push daemon (default 60).")
@click.option("--window", type=click.IntRange(min=1), default=None,
              help="Records sent but not yet acknowledged (default: [feed] window, 1000).")
@click.option("--tls-ca", default=None, help="CA file to verify a TLS push daemon.")
@click.option("--tls-cert", default=None, help="Client certificate for mutual TLS.")
@click.option("--tls-key", default=None, help="Client key for mutual TLS.")
@click.option("--status", "show_status", is_flag=True,
              help="Show what a spool holds (--spool DIR, --watch DIR's, or every spool of the settings).")
@click.option("--retry-refused", is_flag=True, help="Make the records a spool holds as refused pending again.")
@click.option("--activity", metavar="NAME", default=None,
              help="Feed every record in this activity of the queue (default: the queue's globs decide).")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True), required=False)
def feed(config_path: str | None, queue_name: str | None, host: str | None, port: int | None,
         targets: tuple[str, ...], scan_dir: str | None, watch_dir: str | None, recursive: bool | None,
         include: tuple[str, ...], exclude: tuple[str, ...], poll: float | None, settle: float | None,
         spool_dir: str | None, retry_for: float | None, window: int | None, tls_ca: str | None,
         tls_cert: str | None, tls_key: str | None, show_status: bool, retry_refused: bool,
         activity: str | None, file: str | None) -> None:
    """Send records to a push daemon: a FILE of record lines (- for stdin), every file under --scan DIR, or each
    file written into --watch DIR. With a spool (always with --watch), records are kept on disk until answered."""
    settings = load_or_exit(config_path)
    watch_given = {name: value for name, value in
                   (("recursive", recursive), ("include", include), ("exclude", exclude), ("poll", poll),
                    ("settle", settle)) if value}
    if watch_given and watch_dir is None:
        raise click.UsageError(f"--{next(iter(watch_given))} goes with --watch DIR")
    if show_status or retry_refused:
        if file is not None or scan_dir is not None:
            raise click.UsageError("--status and --retry-refused look at a spool: give --spool DIR or --watch DIR")
        spools = _spools(settings, spool_dir, watch_dir)
        _exit_on_error(lambda: _spool_report(spools, show_status, retry_refused))
        return
    sources = [given for given in (file, scan_dir, watch_dir) if given is not None]
    if len(sources) != 1:
        raise click.UsageError("give one of FILE, --scan DIR or --watch DIR")
    if retry_for is not None and (spool_dir is not None or watch_dir is not None):
        raise click.UsageError("--retry-for is for a feed without a spool: a spooled feed never gives up")
    if (host or port) and targets:
        raise click.UsageError("give --target HOST:PORT or --host/--port, not both")
    if tls_key and not tls_cert:
        raise click.UsageError("--tls-key goes with --tls-cert")
    try:
        queue = settings.queue(queue_name or settings.feed.queue).name
    except ConfigError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_CONFIG) from exc
    chosen = _targets(settings, queue, host, port, targets)
    fed = settings.feed
    tls = (tls_ca, tls_cert, tls_key) if (tls_ca or tls_cert) else (fed.tls_ca, fed.tls_cert, fed.tls_key)
    rules = settings.queue(queue).rules
    checked_activity(activity, rules)
    window = window or fed.window
    if watch_dir is not None:
        _watch(settings, watch_dir, spool_dir, chosen, window, tls, rules, recursive, include, exclude, poll, settle,
               activity)
        return
    from dataq.feed.client import DEFAULT_RETRY_FOR
    from dataq.feed.command import feed_command
    from dataq.logs import configure_logging

    # Warnings (an outage) to stderr: stdout holds the summary alone.
    configure_logging(component="feed", level=settings.log.level, fmt=settings.log.format)

    (first_host, first_port), *others = chosen
    run_command(feed_command(host=first_host, port=first_port, also=others, file=file, scan_dir=scan_dir, window=window,
                      tls_ca=tls[0], tls_cert=tls[1], tls_key=tls[2], rules=rules,
                      retry_for=DEFAULT_RETRY_FOR if retry_for is None else retry_for,
                      target_timeout=fed.timeout, failback_after=fed.failback_after, spool=spool_dir,
                      activity=activity))


def _watch(settings: Settings, watch_dir: str, spool_dir: str | None, chosen: list[Target], window: int,
           tls: tuple[str | None, str | None, str | None], rules: Any, recursive: bool | None,
           include: tuple[str, ...], exclude: tuple[str, ...], poll: float | None, settle: float | None,
           activity: str | None) -> None:
    from dataq.feed.client import client_tls_context
    from dataq.feed.command import watch_command
    from dataq.feed.spooled import Link, spool_dir_for
    from dataq.feed.watch import WatchOptions

    fed = settings.feed
    options = WatchOptions(
        root=os.path.abspath(watch_dir),
        recursive=fed.recursive if recursive is None else recursive,
        include=include or fed.include,
        exclude=exclude or fed.exclude,
        poll=poll if poll is not None else fed.poll,
        settle=settle if settle is not None else fed.settle,
        activity=activity,
    )
    daemon_logging(settings, "feed")
    context = _exit_on_error(lambda: client_tls_context(*tls) if (tls[0] or tls[1]) else None)
    link = Link(tuple(chosen), window=window, tls=context, timeout=fed.timeout, failback_after=fed.failback_after)
    spool = spool_dir or spool_dir_for(fed, options.root, settings.data_dir)
    metrics = (settings.metrics.host, fed.metrics_port_for(options.root)) if settings.metrics.enabled else None
    run_command(watch_command(options, spool, link, rules, metrics))


def _targets(settings: Settings, queue: str, host: str | None, port: int | None,
             targets: tuple[str, ...]) -> list[Target]:
    """--target, else --host/--port, else [feed] targets, else the queue's own push daemon."""
    if targets or (not host and not port and settings.feed.targets):
        chosen = []
        for text in targets or settings.feed.targets:
            try:
                chosen.append(parse_target(text))
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--target") from None
        return chosen
    listen = settings.push.host
    return [(host or WILDCARD_HOSTS.get(listen, listen), port or settings.push_port_for(queue))]


def _spools(settings: Settings, spool_dir: str | None, watch_dir: str | None) -> list[str]:
    # The spool's modules are imported where a spool is used: a feed without one starts faster.
    from dataq.feed.spool import DATABASE
    from dataq.feed.spooled import spool_dir_for

    if spool_dir is not None:
        return [spool_dir]
    if watch_dir is not None:
        return [spool_dir_for(settings.feed, watch_dir, settings.data_dir)]
    root = settings.feed.spool or os.path.join(settings.data_dir, "feed")
    found = sorted(os.path.join(root, name) for name in _listdir(root)
                   if os.path.exists(os.path.join(root, name, DATABASE)))
    if not found:
        raise click.ClickException(f"no spools in {root}; give --spool DIR")
    return found


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _spool_report(spools: list[str], show_status: bool, retry: bool) -> None:
    from dataq.feed.spool_status import read_spool_status, retry_refused

    for index, spool in enumerate(spools):
        if retry:
            count = retry_refused(spool)
            click.echo(f"{spool}: {count} refused records are pending again")
        if show_status:
            if index:
                click.echo("")
            click.echo(render_status(read_spool_status(spool)))


def render_status(status: SpoolStatus, now: float | None = None) -> str:
    """The text of ``dataq feed --status`` for one spool."""
    now = time.time() if now is None else now
    notes = status.notes
    running = f"running (pid {status.held_by})" if status.held_by and status.held_by > 0 else (
        "running" if status.held_by else "not running")
    lines = [f"spool {status.directory}: {status.bytes_on_disk / 1e6:.1f} MB, feeder {running}",
             f"  pending: {status.pending}" + (f" (oldest taken {_when(status.oldest_pending, now)})"
                                               if status.oldest_pending else ""),
             f"  refused: {status.refused}", f"  files known: {status.files_known}",
             f"  answered: {notes.get('answered', 0)}, last at {_when(notes.get('last_success'), now)}"]
    if notes.get("outage_since"):
        lines.append(f"  OUTAGE: push daemons unreachable since {_when(notes['outage_since'], now)}")
    if notes.get("connected"):
        lines.append(f"  last connected to {notes['connected']} {_when(notes.get('connected_at'), now)}")
    if notes.get("last_error"):
        lines.append(f"  last error {_when(notes.get('last_error_at'), now)}: {notes['last_error']}")
    for refusal in status.recent_refusals:
        path = refusal.path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        lines.append(f"  refused {_when(refusal.at, now)}: {path}: {refusal.reason}")
    if status.refused > len(status.recent_refusals):
        lines.append(f"  ... and {status.refused - len(status.recent_refusals)} more refused")
    return "\n".join(lines)


def _when(at: Any, now: float) -> str:
    if not at:
        return "never"
    stamp = datetime.fromtimestamp(float(at), UTC).isoformat(timespec="seconds")
    return f"{stamp} ({max(0, round(now - float(at)))} s ago)"


def _exit_on_error(action: Callable[[], Any]) -> Any:
    try:
        return action()
    except DataqError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_FAILURE) from exc

