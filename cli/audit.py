"""``dataq audit``: prove that every file arrived, and put right what did not (:mod:`dataq.audit`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from dataq.audit.brakes import DEFAULT_MAX_REPAIR, Refused, RepairLimit
from dataq.cli.options import config_option
from dataq.config import QueueSettings, Settings, load_settings
from dataq.errors import DataqError

if TYPE_CHECKING:
    from dataq.audit.command import StoringRoot

EXIT_REFUSED = 2
"""The audit could not run, or refused to repair (:data:`dataq.audit.command.EXIT_REFUSED`)."""


def _limit(_ctx: click.Context, _param: click.Parameter, value: str) -> RepairLimit:
    try:
        return RepairLimit.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@config_option
@click.option("--queue", "queue_names", metavar="NAME", multiple=True,
              help="Audit this queue's roots only (repeat for more; default: every queue).")
@click.option("--copies", is_flag=True,
              help="Check the copies this site stores: each copy its manifests name present with its size, and "
              "files no manifest names (dark).")
@click.option("--deep", is_flag=True, help="With --copies: read every copy back and check its checksum too.")
@click.option("--repair", is_flag=True,
              help="Put right what was found: mark missing or damaged copies lost (a damaged one moved into the "
              "quarantine first), so that their records, sent again, are stored anew.")
@click.option("--max-repair", "limit", default=DEFAULT_MAX_REPAIR, show_default=True, callback=_limit,
              metavar="PERCENT%|FILES", help="Repair nothing, and exit 2, if more files than this would be touched "
              "(a share of the files audited, at least 10 files; or a number of files).")
@click.option("--force", is_flag=True,
              help="Repair beyond --max-repair (never a root that looks unmounted).")
@click.option("--json", "as_json", is_flag=True,
              help='One JSON object per finding ({"path", "id", "class", "site", "detail"}), then {"summary": ...}.')
def audit(config_path: str | None, queue_names: tuple[str, ...], copies: bool, deep: bool, repair: bool,
          limit: RepairLimit, force: bool, as_json: bool) -> None:
    """Audit this site: find what is missing, damaged or unknown, and with --repair put it right.

    Exit status: 0 nothing found; 1 something found; 2 the audit could not run, or refused to repair (the
    brakes: too many repairs, a root that looks unmounted; nothing was changed).
    """
    if not copies:
        raise click.UsageError("say what to audit: --copies (the copies this site stores)")
    if deep and not copies:
        raise click.UsageError("--deep applies to --copies")
    # Here, not at the top: `dataq feed` and the daemons load this module too, and need neither Redis nor the store.
    from dataq.audit.command import audit_copies
    from dataq.audit.root_audit import CopiesAudit
    from dataq.embedded.locate import resolve_redis
    from dataq.runtime.loop import run_daemon

    try:
        settings = load_settings(config_path)
        queues = _queues(settings, queue_names)
        roots = storing_roots(settings, queues)
        if not roots:
            raise Refused(f"no storing root to audit: queue(s) {', '.join(q.name for q in queues)} run no "
                          "disk_store")
        url = resolve_redis(settings, start_embedded=False).url
        how = CopiesAudit(settings.site, deep=deep, repair=repair, limit=limit, force=force,
                          progress=not as_json and sys.stderr.isatty())
        status = run_daemon(audit_copies(settings, url, roots, how, as_json=as_json))
    except DataqError as exc:
        # Whatever kept the audit from running (settings, Redis, a refusal) is exit status 2, so that a
        # scheduled audit tells "found something" (1) from "could not look" (2).
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(EXIT_REFUSED) from exc
    raise SystemExit(status)


def _queues(settings: Settings, names: tuple[str, ...]) -> list[QueueSettings]:
    return [settings.queue(name) for name in names] if names else list(settings.queues.values())


def storing_roots(settings: Settings, queues: list[QueueSettings]) -> list[StoringRoot]:
    """The storing roots of ``queues`` (their ``disk_store`` roots)."""
    from dataq.actions.disk_store import DiskStoreAction
    from dataq.actions.registry import options_of
    from dataq.audit.command import StoringRoot

    roots = []
    for queue in queues:
        options = options_of(queue, DiskStoreAction, settings.source)
        if options is not None:
            roots.append(StoringRoot(queue.name, queue.max_errors, options.root))
    return roots
