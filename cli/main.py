"""``dataq``: run the daemons. ``dataq push|pop|run|feed --config FILE``."""

from __future__ import annotations

import os

import click

from dataq import __version__
from dataq.cli.options import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    config_option,
    daemon_logging,
    load_or_exit,
    loglevel_option,
    queue_option,
    run_command,
)
from dataq.config import MAX_PORT, Settings, describe_source, load_settings
from dataq.errors import ConfigError, DataqError
from dataq.logs import configure_logging, get_logger
from dataq.runtime.systemd import ONESHOT_SEND_TIMEOUT

log = get_logger()


def _daemon_settings(
    config_path: str | None, queue_name: str | None, host: str | None, port: int | None, loglevel: str | None
) -> tuple[Settings, str]:
    """A daemon's settings and queue, with the 2014 switches ``--host --port --loglevel`` over file and environment.

    ``--host`` and ``--port`` say where the queue's push daemon listens: they set ``push.host``, and the key its
    port comes from (the queue's ``push_port`` if set, else ``push.port``), so an explicit ``--port`` wins.
    ``--loglevel`` sets ``log.level``. A mistake of the file or environment exits with the configuration status;
    the switches are then checked as the keys they set (by the settings' own rules), a refused one is a usage error.
    """
    settings = load_or_exit(config_path)
    try:
        queue = settings.queue(queue_name)
    except ConfigError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_CONFIG) from exc
    options: dict[tuple[str, ...], tuple[str, object]] = {}
    if host is not None:
        options["push", "host"] = ("--host", host)
    if port is not None:
        options[("push", "port") if queue.push_port is None else ("queues", queue.name, "push_port")] = ("--port", port)
    if loglevel is not None:
        options["log", "level"] = ("--loglevel", loglevel)
    if not options:
        return settings, queue.name
    try:
        return load_settings(config_path, options=options), queue.name
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


# No auto_envvar_prefix: the environment speaks through DATAQ_CONFIG and the overrides the settings document
# (dataq.config.schema.ENV_OVERRIDES), not through one more variable per option.
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dataq")
def main() -> None:
    """dataq: a resilient data queue. Feeders push file records over TCP; actions run on each record."""


@main.command()
@config_option
@queue_option
@click.option("--host", metavar="HOST", default=None, help="Address to listen on, instead of [push] host.")
@click.option("--port", type=click.INT, metavar="PORT", default=None,
              help="Port to listen on, instead of the queue's push_port or [push] port (0: any free port).")
@loglevel_option("Least severe level logged, instead of [log] level.")
def push(config_path: str | None, queue_name: str | None, host: str | None, port: int | None,
         loglevel: str | None) -> None:
    """Run the push daemon: read records from TCP feeders into the queue."""
    from dataq.push.daemon import run_push_daemon

    settings, queue = _daemon_settings(config_path, queue_name, host, port, loglevel)
    daemon_logging(settings, "push")
    run_command(run_push_daemon(settings, queue))


@main.command()
@config_option
@queue_option
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=None, help="Records run at once.")
# The 2014 dataq_pop_svc.py took --host/--port too: accepted (and checked) so its command lines keep working.
@click.option("--host", metavar="HOST", default=None,
              help="As for dataq push; checked, but a pop daemon listens on nothing (the 2014 switch).")
@click.option("--port", type=click.INT, metavar="PORT", default=None,
              help="As for dataq push; checked, but a pop daemon listens on nothing (the 2014 switch).")
@loglevel_option("Least severe level logged, instead of [log] level.")
def pop(config_path: str | None, queue_name: str | None, concurrency: int | None, host: str | None,
        port: int | None, loglevel: str | None) -> None:
    """Run the pop daemon: claim records and run the queue's actions on them."""
    from dataq.pop.daemon import run_pop_daemon

    settings, queue = _daemon_settings(config_path, queue_name, host, port, loglevel)
    daemon_logging(settings, "pop")
    run_command(run_pop_daemon(settings, queue, concurrency=concurrency))


@main.command()
@config_option
def run(config_path: str | None) -> None:
    """Run the whole suite in the foreground: embedded Redis (if none is configured), push and pop daemons."""
    from dataq.embedded.locate import resolve_redis
    from dataq.embedded.suite import run_suite

    settings = load_or_exit(config_path)
    daemon_logging(settings, "run")
    try:
        # Started here, on the main thread, before the event loop: the server must die with this process, and
        # the kernel ties that to the thread that starts it (dataq.runtime.children). A Ctrl-C while it loads
        # its AOF is a KeyboardInterrupt here, which stops it.
        redis = resolve_redis(settings, start_embedded=True, die_with_parent=True)
    except DataqError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_FAILURE) from exc
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED) from None
    try:
        run_command(run_suite(settings, redis))
    finally:
        redis.close()  # last: the daemons have stopped
        log.info("dataq stopped")


@main.command()
@config_option
def redis(config_path: str | None) -> None:
    """Run the embedded redis-server in the foreground (for dataq-redis.service); a no-op with [redis] url set."""
    from dataq.embedded.service import run_embedded_redis

    settings = load_or_exit(config_path)
    daemon_logging(settings, "redis")
    run_command(run_embedded_redis(settings))


@main.command()
@config_option
@click.option("--host", metavar="HOST", default=None, help="Address to listen on, instead of [web] host.")
@click.option("--port", type=click.IntRange(0, MAX_PORT), metavar="PORT", default=None,
              help="Port to listen on, instead of [web] port (0: a free port, logged).")
def web(config_path: str | None, host: str | None, port: int | None) -> None:
    """Serve the operator's web console: every queue's counts, rates, workers, records and events, and the
    operator's actions for whoever holds [web] token."""
    from dataq.web.server import run_web

    settings = load_or_exit(config_path)
    options: dict[tuple[str, ...], tuple[str, object]] = {}
    if host is not None:
        options["web", "host"] = ("--host", host)
    if port is not None:
        options["web", "port"] = ("--port", port)
    if options:
        try:
            settings = load_settings(config_path, options=options)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from exc
    daemon_logging(settings, "web")
    run_command(run_web(settings))


@main.command()
@config_option
@click.option("--has", "daemon", metavar="DAEMON", default=None,
              help="Exit 0 if the settings run DAEMON (redis, push:QUEUE, pop:QUEUE, web or feed:DIR), else 1: the "
                   "units' ExecCondition=, so that a daemon of a queue no longer configured is not started.")
@click.argument("output_dirs", nargs=-1, type=click.Path(file_okay=False), metavar="[NORMAL_DIR [EARLY_DIR LATE_DIR]]")
def units(config_path: str | None, daemon: str | None, output_dirs: tuple[str, ...]) -> None:
    """The systemd units `systemctl start dataq` starts for these settings, one per line (dataq.service runs
    this: invalid settings fail it). Given a generator's output directories (systemd.generator(7)), make
    dataq.service and dataq.target want them there instead: systemd/dataq-generator runs this at every
    daemon-reload."""
    from dataq.embedded.suite import daemon_name, suite_daemons
    from dataq.embedded.units import (
        audit_scheduled,
        prepare_wants,
        stale_units,
        suite_units,
        write_schedule,
        write_wants,
    )

    if len(output_dirs) not in (0, 1, 3):
        raise click.UsageError(f"give no directory, or a generator's one or three, not {len(output_dirs)}")
    if output_dirs:
        # Before the settings are read: settings that fail to load leave empty wants, which `dataq units`
        # then reports as changed since the reload, rather than as "no systemd".
        prepare_wants(output_dirs[0])
    settings = load_or_exit(config_path)
    if daemon is not None:
        configured = ["redis", *(daemon_name(command, queue) for command, queue in suite_daemons(settings))]
        if daemon not in configured:
            click.echo(f"{daemon} is not in the settings ({describe_source(settings)}), which run: "
                       f"{', '.join(configured)}; not started", err=True)
            raise SystemExit(EXIT_FAILURE)
        return
    wanted = suite_units(settings)
    if output_dirs:
        problems = write_wants(wanted, output_dirs[0])
        if audit_scheduled(settings):
            write_schedule(settings, output_dirs[0])
        for problem in problems:
            click.echo(f"dataq-generator: {problem}", err=True)
        raise SystemExit(EXIT_FAILURE if problems else 0)
    click.echo("\n".join(["dataq-redis.service", *wanted]))
    if stale := stale_units(wanted):
        click.echo(f"warning: the settings changed since systemd last read them ({', '.join(stale)}): run "
                   "systemctl daemon-reload, then systemctl restart dataq", err=True)


@main.command("notify-crash")
@config_option
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=ONESHOT_SEND_TIMEOUT, show_default=True,
              help="Seconds to keep trying to send.")
@click.argument("unit")
def notify_crash(config_path: str | None, timeout: float, unit: str) -> None:
    """Mail the 'crashed' notice for a failed dataq unit (the units' OnFailure= hook).

    Exits 0 once mailed (or with mail disabled: the crash is logged either way), 1 if not delivered in time.
    """
    from dataq.ops.crash import notify_crashed

    settings = load_or_exit(config_path)
    # stderr only: this runs under systemd, whose journal keeps it with the failed unit's invocation.
    configure_logging(component="notify-crash", level=settings.log.level, fmt=settings.log.format)
    try:
        status = notify_crashed(settings, unit, os.environ, timeout)
    except ConfigError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_CONFIG) from exc
    raise SystemExit(status)


def _register_commands() -> None:
    # The archive commands need pyspark only when they run, so registering them costs nothing without it.
    from dataq.cli.archive import archive
    from dataq.cli.audit import audit
    from dataq.cli.feeding import feed

    main.add_command(archive)
    main.add_command(audit)
    main.add_command(feed)


_register_commands()
