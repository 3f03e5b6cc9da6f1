"""``dataq audit``: prove that every file arrived, and put right what did not (:mod:`dataq.audit`)."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import TYPE_CHECKING

import click

from dataq.audit.brakes import DEFAULT_MAX_REPAIR, Refused, Repair, RepairLimit
from dataq.cli.options import config_option
from dataq.config import QueueSettings, Settings, load_settings
from dataq.errors import DataqError

if TYPE_CHECKING:
    from dataq.audit.command import Directories, StoringRoot
    from dataq.audit.findings import Finding
    from dataq.audit.hashing import Hashing

EXIT_REFUSED = 2
"""The audit could not run, or refused to repair (:data:`dataq.audit.command.EXIT_REFUSED`)."""


def _limit(_ctx: click.Context, _param: click.Parameter, value: str | None) -> RepairLimit | None:
    if value is None:
        return None
    try:
        return RepairLimit.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@config_option
@click.option("--queue", "queue_names", metavar="NAME", multiple=True,
              help="The queue whose records the directories' files are (default: [feed] queue, else the first); "
              "with --copies, audit this queue's root only (repeat for more; default: every queue's).")
@click.option("--copies", is_flag=True,
              help="Check the copies this site stores: each copy its manifests name present with its size, and "
              "files no manifest names (dark).")
@click.option("--deep", is_flag=True, help="With --copies: read every copy back and check its checksum too.")
@click.option("--repair", is_flag=True,
              help="Put right what was found: feed files no site knows, send lost files again down the chain; "
              "with --copies, mark missing or damaged copies lost (a damaged one moved into the quarantine).")
@click.option("--max-repair", "limit", default=None, callback=_limit, metavar="PERCENT%|FILES",
              help=f"Repair nothing, and exit 2, if more files than this would be touched (a share of the files "
              f"audited, at least 10 files; or a number of files) [default: {DEFAULT_MAX_REPAIR}].")
@click.option("--force", is_flag=True,
              help="Repair beyond --max-repair (never a root that looks unmounted, nor a missing directory).")
@click.option("--json", "as_json", is_flag=True,
              help='One JSON object per finding ({"path", "id", "class", "site", "detail"}), then {"summary": ...}.')
@click.option("--scheduled", is_flag=True,
              help="The audit [audit] describes (dataq-audit.timer runs it): its directories (or [feed] "
              "directories), the copies, deep, repair and max_repair as set there; what it finds is mailed.")
@click.argument("directories", nargs=-1, type=click.Path(file_okay=True, dir_okay=True))
def audit(config_path: str | None, queue_names: tuple[str, ...], copies: bool, deep: bool, repair: bool,
          limit: RepairLimit | None, force: bool, as_json: bool, scheduled: bool, directories: tuple[str, ...]
          ) -> None:
    """Audit this site: where each file of DIRECTORIES is along the chain, asked afresh at every site; with
    --copies, the copies this site stores. --repair puts right what was found.

    Classes: arrived, in_flight, failed, never_fed, lost, unknown (a site did not answer), unreadable; with
    --copies: missing_copy, corrupt_copy, dark (never deleted), in_flight.

    Exit status: 0 nothing found; 1 something found; 2 the audit could not run, or refused to repair (the
    brakes: too many repairs, a root that looks unmounted, a directory that is not there; nothing was changed).
    """
    if scheduled and (copies or deep or repair or force or directories or limit is not None):
        raise click.UsageError("--scheduled takes what to audit from [audit]: give no DIRECTORIES, --copies, "
                               "--deep, --repair, --max-repair or --force with it")
    if not scheduled and not copies and not directories:
        raise click.UsageError("say what to audit: DIRECTORIES (of sources), or --copies (the copies stored here)")
    if deep and not copies:
        raise click.UsageError("--deep applies to --copies")
    progress = not as_json and sys.stderr.isatty()
    policy = Repair(repair, limit or RepairLimit.parse(DEFAULT_MAX_REPAIR), force)
    with contextlib.ExitStack() as hashing:
        _audit(config_path, queue_names, copies, deep, policy, as_json, scheduled, directories, progress, hashing)


def _audit(config_path: str | None, queue_names: tuple[str, ...], copies: bool, deep: bool, policy: Repair,
           as_json: bool, scheduled: bool, directories: tuple[str, ...], progress: bool,
           hashing: contextlib.ExitStack) -> None:
    """Run the audits; ``hashing`` holds the hashing of the directories' files, begun before anything else."""
    try:
        settings = load_settings(config_path)
        if scheduled:
            scheduled_audit = settings.audit
            directories = scheduled_audit.directories or settings.feed.directories
            copies, deep = scheduled_audit.copies, scheduled_audit.deep
            policy = Repair(scheduled_audit.repair, scheduled_audit.limit)
        queues = _queues(settings, queue_names)
        roots = storing_roots(settings, queues) if copies else []
        if scheduled and not roots and not directories:
            click.echo("nothing to audit: [audit] names no directories, [feed] watches none, and no queue stores "
                       "copies")
            raise SystemExit(0)
        if copies and not roots and not scheduled:
            raise Refused(f"no storing root to audit: queue(s) {', '.join(q.name for q in queues)} run neither "
                          "disk_store nor archive_ingest")
        started = _begin_hashing(settings, queue_names, directories, hashing) if directories else None
        # Here, not at the top: `dataq feed` and the daemons load this module too, and need neither Redis nor the
        # store; and the files hash meanwhile.
        from dataq.audit.command import run_audits
        from dataq.audit.root_audit import CopiesAudit
        from dataq.embedded.locate import resolve_redis
        from dataq.runtime.loop import run_daemon

        sources = _sources(settings, queue_names, started, policy, progress) if started else None
        url = resolve_redis(settings, start_embedded=False).url
        how = CopiesAudit(settings.site, deep=deep, repair=policy, progress=progress)
        outcome = run_daemon(run_audits(settings, url, roots=roots, copies=how if copies and roots else None,
                                        sources=sources, as_json=as_json))
        if scheduled:
            run_daemon(tell(settings, outcome.counts, outcome.findings, outcome.repaired, outcome.refused))
    except DataqError as exc:
        # Whatever kept the audit from running (settings, Redis, a refusal) is exit status 2, so that a
        # scheduled audit tells "found something" (1) from "could not look" (2).
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_REFUSED) from exc
    except Exception as exc:
        # A bug must not exit 1, which says "found something" (and is a success of the scheduled unit).
        click.echo(f"Error: the audit failed: {exc!r}", err=True)
        traceback.print_exc()
        raise SystemExit(EXIT_REFUSED) from exc
    raise SystemExit(outcome.status)


def _queues(settings: Settings, names: tuple[str, ...]) -> list[QueueSettings]:
    return [settings.queue(name) for name in names] if names else list(settings.queues.values())


def storing_roots(settings: Settings, queues: list[QueueSettings]) -> list[StoringRoot]:
    """The storing roots of ``queues``: their ``disk_store`` roots and ``archive_ingest`` archive roots (the
    catalog kept inside one is no copy)."""
    from dataq.actions.archive.ingest import ArchiveIngestAction
    from dataq.actions.disk_store import DiskStoreAction
    from dataq.actions.registry import options_of
    from dataq.audit.command import StoringRoot

    roots = []
    for queue in queues:
        stored = options_of(queue, DiskStoreAction, settings.source)
        if stored is not None:
            roots.append(StoringRoot(queue.name, queue.max_errors, stored.root))
        archived = options_of(queue, ArchiveIngestAction, settings.source)
        if archived is not None:
            catalog = os.path.relpath(archived.catalog_path, archived.archive_root)
            skip = () if catalog.startswith("..") else (catalog.split(os.sep)[0],)
            roots.append(StoringRoot(queue.name, queue.max_errors, archived.archive_root, skip))
    return roots


def _begin_hashing(settings: Settings, queue_names: tuple[str, ...], directories: tuple[str, ...],
                   stack: contextlib.ExitStack) -> Hashing:
    """The hashing of the files of ``directories``, chosen as their feeders choose them ([feed]), begun now (its
    workers forked before this process runs a thread of its own), ended with ``stack``; Refused when a directory is
    not there."""
    from dataq.audit.hashing import Hashing
    from dataq.audit.sources import HashPool, check_directories
    from dataq.feed.watch import WatchOptions

    if len(queue_names) > 1:
        raise click.UsageError("the files of DIRECTORIES are one queue's: give --queue once")
    queue = settings.queue(queue_names[0] if queue_names else settings.feed.queue)
    feed = settings.feed
    watched = [WatchOptions(directory, recursive=feed.recursive, include=feed.include, exclude=feed.exclude,
                            settle=feed.settle) for directory in directories]
    check_directories(watched)
    hashing = Hashing(stack.enter_context(HashPool()), watched, queue.rules.algorithm)
    stack.callback(hashing.stop)
    return hashing


def _sources(settings: Settings, queue_names: tuple[str, ...], hashing: Hashing, repair: Repair,
             progress: bool) -> Directories:
    """The directories being hashed, with how this site asks its chain (as ``network_move`` hands on: its next
    sites, its TLS, its timeout)."""
    from dataq.actions.chain_link import chain_link
    from dataq.audit.command import Directories
    from dataq.audit.dir_audit import DirectoryAudit
    from dataq.audit.questions import AuditDesk

    queue = settings.queue(queue_names[0] if queue_names else settings.feed.queue)
    link = chain_link(settings, queue)
    roots = storing_roots(settings, [queue])
    desk = AuditDesk(settings.site, queue.max_errors, link.next_sites, roots[0].root if roots else None,
                     settings.data_dir)
    how = DirectoryAudit(desk, queue.rules, repair=repair, progress=progress)
    return Directories(queue.name, list(hashing.directories), how, link.asker(), link.arrived_asker(), hashing)


async def tell(settings: Settings, counts: dict[str, int], findings: list[Finding], repaired: list[Finding],
               refused: list[str]) -> None:
    """Log what a scheduled audit found and, with ``[mail] enabled``, mail it (nothing when nothing was found)."""
    from dataq.audit.notice import audit_notice
    from dataq.logs import get_logger
    from dataq.ops.crash import send_now

    config = f" --config {settings.source}" if settings.source else ""
    notice = audit_notice(settings.site, counts, findings, repaired, refused, f"dataq audit{config} --scheduled")
    if notice is None:
        return
    get_logger().warning("the scheduled audit found something", subject=notice.subject, counts=counts)
    if settings.mail.enabled and not await send_now(settings.mail, None, notice):
        click.echo("Warning: the audit's notice could not be mailed (see the log)", err=True)
