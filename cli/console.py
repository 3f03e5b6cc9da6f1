"""``dataq-cli``: the operator's console, with the switches of the 2014 data-q's ``dataq_cli.py``.

This module only parses the switches, checks what can be checked before touching the queue, and turns the
outcome into output and an exit status; :mod:`.operations` does the work in its fixed order.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import replace
from typing import NoReturn

import click

from dataq.config import REDIS_URL_ENV, SYSTEM_CONFIG, QueueSettings, Settings, describe_source
from dataq.custody.desk import ReceiptDesk
from dataq.custody.journey import Tracer
from dataq.embedded.locate import resolve_redis
from dataq.errors import ConfigError, DataqError, InvalidRecord, NotReplicated, StoreUnavailable
from dataq.logs import configure_logging
from dataq.record import Record, RecordRules, parse_line
from dataq.store import QueueList, QueueStore

from . import files
from .operations import DEFAULT_EVENTS, STEPS, Context, Request, execute
from .options import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    checked_activity,
    config_option,
    load_or_exit,
    loglevel_option,
    queue_option,
)
from .render import Renderer

HELP_WIDTH = 100
ON_OFF = click.Choice(["on", "off"])
LIST_CHOICES = ("active", "inactive", "records")


def _epilog() -> str:
    width = max(len(switches) for switches, _, _ in STEPS) + 2
    steps = "\n".join(f"  {n:>2}. {switches:<{width}}{what}" for n, (switches, what, _) in enumerate(STEPS, start=1))
    # \b keeps click from re-wrapping a paragraph.
    return f"""\b
Whatever their order on the command line, the switches are carried out in this order:
{steps}

--pushstr lines and the files of --pushfile, --load and --dump are checked before any step runs.
The first step that fails stops the call: the steps before it stay done, the later ones are not
attempted. A range move is atomic: it moves all its records or none. FIRST and LAST are record ids
(checksums); a range is inclusive, as the records stand in the list (--list prints them in that
order). --load pushes the file's lines in file order (the first line runs first); a malformed line
stops it, and the records before it stay loaded (Redis acknowledged them). --dump writes its file
whole or not at all, oldest record first (for the active list: the next to run first), so a --load
of it queues the records in the order they had. --limit and --offset page --list only. --clear
also forgets the ids the queue remembers done (remember_done), so records loaded after it are moved
again; --again pushes records remembered done without forgetting the others.

\b
Exit status:
  {EXIT_OK}  success (with --health: healthy)
  {EXIT_FAILURE}  refused: unknown id, reversed range, id in the other list, malformed record, unreadable or
     unwritable file; or --health found the queue unhealthy (Redis not answering included)
  {EXIT_USAGE}  usage error
  {EXIT_CONFIG}  configuration error: settings file, unknown queue, invalid Redis URL
  {EXIT_UNAVAILABLE}  Redis is unavailable
  {EXIT_INTERRUPTED}  interrupted by Ctrl-C (--follow ends on Ctrl-C with 0)
"""


def _pushes(pushstr: tuple[str, ...], pushfile: tuple[str, ...], rules: RecordRules,
            again: bool, activity: str | None) -> tuple[tuple[str, Record], ...]:
    pushes: list[tuple[str, Record]] = []
    if activity is not None:
        rules = rules.naming_any_activity()  # each line's own activity is replaced
    for line in pushstr:
        try:
            pushes.append(("pushstr", parse_line(line, rules)))
        except InvalidRecord as exc:
            raise InvalidRecord(f"--pushstr {line!r}: {exc}") from exc
    pushes += [("pushfile", files.file_record(path, rules)) for path in pushfile]
    if activity is not None:
        pushes = [(switch, replace(record, activity=activity)) for switch, record in pushes]
    return tuple((switch, replace(record, again=True) if again else record) for switch, record in pushes)


def _checked_id(record_id: str, rules: RecordRules, switch: str = "--show") -> str:
    try:
        return rules.check_checksum(record_id)
    except InvalidRecord as exc:
        raise InvalidRecord(f"{switch} {record_id!r}: {exc}") from exc


def _check_files(load: str | None, dump: str | None) -> None:
    """Refuse unusable files before any step runs, so a typo in a path changes nothing."""
    if load is not None and load != files.STDIN and not (os.path.isfile(load) and os.access(load, os.R_OK)):
        problem = "not a readable file" if os.path.exists(load) else "no such file"
        raise files.FileProblem(f"cannot read {load}: {problem}")
    if dump is not None:
        directory = os.path.dirname(os.path.abspath(dump))
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
            raise files.FileProblem(f"cannot write {dump}: {directory} is not a writable directory")


def _unavailable(exc: StoreUnavailable, url: str, settings: Settings, explicit_url: bool) -> str:
    if isinstance(exc, NotReplicated):
        return (f"the master at {url} made the change, but it was {exc}, so a fail-over could undo it; "
                "see the replicas with --info and where the records are with --list")
    cause = exc.__cause__ or exc
    hint = ""
    if not explicit_url and settings.redis.embedded:
        hint = "; is `systemctl start dataq` done?" if settings.source == SYSTEM_CONFIG else "; is `dataq run` running?"
    if explicit_url:
        origin = ""
    elif os.environ.get(REDIS_URL_ENV):  # set and empty means the embedded server, as the settings say
        origin = f" (from ${REDIS_URL_ENV})"
    else:
        origin = f" (from the {describe_source(settings)})"
    return f"Redis is unavailable at {url}{origin}: {cause}{hint}"


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH},
    epilog=_epilog(),
)
@config_option
@queue_option
@click.option("--redis", "redis_url", metavar="URL", default=None,
              help="Redis URL (redis://, rediss://, unix://) instead of the settings' one.")
@click.option("--host", "redis_host", metavar="HOST", default=None,
              help="Redis host instead of the settings' URL's (whose port, db and credentials stay; or 127.0.0.1).")
@click.option("--port", "redis_port", type=click.INT, metavar="PORT", default=None,
              help="Redis port instead of the settings' URL's (or 6379). Neither with --redis nor [redis] sentinels.")
@loglevel_option("Log diagnostics (dataq's and its libraries') from this level on, to stderr.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document per switch per line, for scripts.")
@click.option("-s", "--summary", is_flag=True,
              help="Counts, flags, live workers and pushed/done/failed rates per minute.")
@click.option("-i", "--info", is_flag=True, help="About the Redis server: version, memory, persistence, role, clients.")
@click.option("-l", "--list", "list_", type=click.Choice(LIST_CHOICES), default=None,
              help="One line per record: '<checksum> : path=<path>, size=<size>'; active: next to run last.")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="List at most this many records.")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="Skip this many records of the list first.")
@click.option("--show", metavar="ID", default=None,
              help="Everything about one record: fields, where it is, errors, last error, events.")
@click.option("--why", metavar="ID", default=None,
              help="Why one record is not done yet, in one line with its next step (--json: a code and fields).")
@click.option("--trace", metavar="ID", default=None,
              help="One record's journey across the sites of a cascade: pushed, done, handed on, receipt.")
@click.option("-a", "--action", type=ON_OFF, default=None, help="Turn on/off running actions on queue records.")
@click.option("-r", "--read", type=ON_OFF, default=None, help="Turn on/off reading feeders and pushing to the queue.")
@click.option("--clear", is_flag=True, help="Forget every record of the queue without running any action.")
@click.option("--dump", type=click.Path(dir_okay=False), metavar="FILE", default=None,
              help="Write the active list (or the --list target) to FILE as '<path> <checksum> <size>' lines.")
@click.option("--load", "--push", "load", type=click.Path(dir_okay=False, allow_dash=True), metavar="FILE",
              default=None, help="Push FILE's record lines (- for stdin); duplicates are ignored with a warning.")
@click.option("--advance", nargs=2, metavar="FIRST LAST", default=None,
              help="Move active records FIRST..LAST to the next-to-run end.")
@click.option("--deactivate", nargs=2, metavar="FIRST LAST", default=None,
              help="Move active records FIRST..LAST to the inactive list.")
@click.option("--activate", nargs=2, metavar="FIRST LAST", default=None,
              help="Move inactive records FIRST..LAST back to the active list.")
@click.option("--delete", type=(click.Choice([q.value for q in QueueList]), str, str), default=None,
              metavar="{active|inactive} FIRST LAST", help="Forget records FIRST..LAST of that list.")
@click.option("--redo", is_flag=True, help="Move every inactive record back to the active list.")
@click.option("--pushstr", multiple=True, metavar='"PATH CHECKSUM SIZE"', help="Push one record line.")
@click.option("--pushfile", multiple=True, type=click.Path(dir_okay=False), metavar="PATH",
              help="Push the record of a data file (its md5 and size computed here).")
@click.option("--again", is_flag=True,
              help="With --load, --pushstr, --pushfile: push records even if the queue remembers them done, and "
              "hand them on marked so (every site moves them again).")
@click.option("--activity", metavar="NAME", default=None,
              help="With --load, --pushstr, --pushfile: queue every record in this activity of the queue.")
@click.option("--workers", is_flag=True,
              help="The worker registry: host, pid, since, heartbeat, done, failed (with --json, also destinations "
              "that take fewer network_move calls at once).")
@click.option("--events", type=click.IntRange(min=0), is_flag=False, flag_value=DEFAULT_EVENTS, default=None,
              metavar="[N]", help=f"The last N events (default {DEFAULT_EVENTS}): time, kind, id, detail.")
@click.option("--follow", is_flag=True, help="After everything else, tail the events until Ctrl-C.")
@click.option("--health", is_flag=True,
              help="Exit 0 if Redis answers and every daemon has a fresh heartbeat, else 1 with the reason.")
def main(
    config_path: str | None,
    queue_name: str | None,
    redis_url: str | None,
    redis_host: str | None,
    redis_port: int | None,
    loglevel: str | None,
    as_json: bool,
    summary: bool,
    info: bool,
    list_: str | None,
    limit: int | None,
    offset: int,
    show: str | None,
    why: str | None,
    trace: str | None,
    action: str | None,
    read: str | None,
    clear: bool,
    dump: str | None,
    load: str | None,
    advance: tuple[str, str] | None,
    deactivate: tuple[str, str] | None,
    activate: tuple[str, str] | None,
    delete: tuple[str, str, str] | None,
    redo: bool,
    pushstr: tuple[str, ...],
    pushfile: tuple[str, ...],
    again: bool,
    activity: str | None,
    workers: bool,
    events: int | None,
    follow: bool,
    health: bool,
) -> None:
    """Inspect and steer a dataq queue: the switches of the original data-q's dataq_cli.py, and a few more.

    Any number of switches may be combined in one call. The queue is the first configured unless --queue names
    another. Redis is the configured server, else the embedded one that `dataq run` started (dataq-cli never
    starts one).
    """
    if (limit is not None or offset) and list_ is None:
        raise click.UsageError("--limit and --offset page --list; give --list too")
    if again and not (load or pushstr or pushfile):
        raise click.UsageError("--again applies to --load, --pushstr and --pushfile; give one of them too")
    if activity is not None and not (load or pushstr or pushfile):
        raise click.UsageError("--activity applies to --load, --pushstr and --pushfile; give one of them too")
    if redis_url is not None and (redis_host is not None or redis_port is not None):
        raise click.UsageError("--redis and --host/--port both name the Redis server; give one or the other")
    settings = load_or_exit(config_path)
    if redis_host is not None or redis_port is not None:
        try:
            redis_url = settings.redis.url_at(redis_host, redis_port)
        except ValueError as exc:
            raise click.UsageError(f"--host/--port: {exc}") from exc
    if loglevel is not None:  # stderr only: stdout carries the switches' output
        configure_logging(component="dataq-cli", level=loglevel, fmt=settings.log.format)
    try:
        queue = settings.queue(queue_name)
    except ConfigError as exc:
        _fail(str(exc), EXIT_CONFIG)
    try:
        request = Request(
            action=None if action is None else action == "on",
            read=None if read is None else read == "on",
            clear=clear,
            pushes=_pushes(pushstr, pushfile, queue.rules, again, checked_activity(activity, queue.rules)),
            load=load,
            again=again,
            activity=activity,
            advance=advance,
            deactivate=deactivate,
            activate=activate,
            delete=None if delete is None else (QueueList(delete[0]), delete[1], delete[2]),
            redo=redo,
            dump=dump,
            listing=list_,
            offset=offset,
            limit=limit,
            show=None if show is None else _checked_id(show, queue.rules),
            why=None if why is None else _checked_id(why, queue.rules, "--why"),
            trace=None if trace is None else _checked_id(trace, queue.rules, "--trace"),
            events=DEFAULT_EVENTS if follow and events is None else events,
            follow=follow,
            workers=workers,
            info=info,
            health=health,
            summary=summary,
        )
        _check_files(load, dump)
    except DataqError as exc:
        _fail(str(exc), EXIT_FAILURE)
    if request == Request():
        raise click.UsageError("nothing to do: give at least one switch (see --help)")
    try:
        url = redis_url or resolve_redis(settings, start_embedded=False).url
        store = QueueStore.open(settings, url, queue.name)
    except DataqError as exc:
        _fail(str(exc), EXIT_CONFIG)
    out = Renderer(queue.name, as_json=as_json)
    ctx = Context(store, request, out, queue.rules, progress=files.show_progress(as_json),
                  max_errors=queue.max_errors,
                  tracer=None if trace is None else _tracer(settings, queue))
    try:
        status = asyncio.run(execute(ctx))
    except BrokenPipeError:
        # The reader went away (`dataq-cli --list active | head`): what it read is all it wanted.
        _silence_stdout()
        raise SystemExit(EXIT_OK) from None
    except KeyboardInterrupt:  # --follow ends on Ctrl-C by itself, with status 0; this is Ctrl-C elsewhere
        raise SystemExit(EXIT_INTERRUPTED) from None
    except StoreUnavailable as exc:
        message = _unavailable(exc, url, settings, explicit_url=redis_url is not None)
        if health:
            out.health(False, message, 0, 0)
            raise SystemExit(EXIT_FAILURE) from exc
        _fail(message, EXIT_UNAVAILABLE)
    except ConfigError as exc:
        _fail(str(exc), EXIT_CONFIG)
    except DataqError as exc:
        _fail(str(exc), EXIT_FAILURE)
    raise SystemExit(status)


def _tracer(settings: Settings, queue: QueueSettings) -> Tracer:
    """How --trace asks the next sites: as this site, over the hand-on's TLS, within its timeout."""
    from dataq.actions.chain_link import chain_link

    link = chain_link(settings, queue)
    return Tracer(ReceiptDesk(settings.site, queue.max_errors, link.next_sites), link.tls, link.timeout)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit does not raise a second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _fail(message: str, status: int) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(status)
