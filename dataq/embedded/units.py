"""The suite as systemd units: what ``systemctl start dataq`` starts, derived from the settings by a generator.

systemd runs every generator (systemd.generator(7)) at boot and at each ``systemctl daemon-reload``, before it loads
the units. dataq's (``systemd/dataq-generator``, which runs ``dataq units``) reads the system's settings and makes
``dataq.service`` and ``dataq.target`` want the daemons the suite runs (:func:`dataq.embedded.suite.suite_daemons`):
``dataq-push@QUEUE`` and ``dataq-pop@QUEUE`` for every queue, and ``dataq-web`` unless ``[web] enabled = false``,
and ``dataq-feed@DIR`` for each of ``[feed] directories``. These are symlinks in the generator's output directory,
as ``systemctl enable`` would make under /etc, but made afresh from the settings at every reload: adding or removing
a queue is an edit and a ``daemon-reload``, and no instance is enabled by hand. Both units want
``dataq-redis.service`` in their own files; it does nothing when Redis is not embedded.

``dataq.service`` wants the daemons itself, not only through the target, because systemd pulls in what a unit
wants when the unit is started while already active only one level deep: ``systemctl start dataq`` after a
reload that added a queue starts that queue's daemons.

A generator runs before anything else is up and must not wait or fail the boot: this one reads one file and
writes symlinks. Settings it cannot load are reported on stderr, which the journal keeps, and nothing is wanted;
``dataq.service`` runs ``dataq units`` too, so ``systemctl start dataq`` then fails with the same error. Each
daemon's unit asks ``dataq units --has push:QUEUE`` first (``ExecCondition=``): a daemon the settings no longer
run (a queue removed, the web console disabled, settings that do not load) is skipped, not started to fail, when
``systemctl restart dataq`` passes the restart on to it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from dataq.config import Settings
from dataq.embedded.suite import suite_daemons
from dataq.runtime.systemd import escape_instance, path_instance

SUITE_UNITS = ("dataq.service", "dataq.target")
"""The units that want every daemon of the suite: ``systemctl start dataq``, and the target that groups them."""
UNIT_DIRS = ("/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
"""Where an administrator's or a package's unit files live (systemd.unit(5)), searched for the templates."""
GENERATED_DIR = "/run/systemd/generator"
"""The generators' normal output directory, where the units wanted at the last reload are."""


AUDIT_TIMER = "dataq-audit.timer"
"""Starts the scheduled audit (``dataq audit --scheduled``) when ``[audit] when`` says."""
SCHEDULE_DROP_IN = "50-when.conf"
STORING_ACTIONS = frozenset({"disk_store", "archive_ingest"})
"""The actions whose copies an audit checks (they keep manifests)."""
"""The drop-in of :data:`AUDIT_TIMER` the generator writes ``[audit] when`` into."""


def suite_units(settings: Settings) -> list[str]:
    """The units the suite's units (:data:`SUITE_UNITS`) want for ``settings``, besides ``dataq-redis.service``:
    a feeder's instance is its directory as ``systemd-escape --path`` writes it (``%f`` gives the path back); the
    audit's timer when an audit is scheduled."""
    units = [f"dataq-{command}.service" if queue is None
             else f"dataq-{command}@{path_instance(queue) if command == 'feed' else escape_instance(queue)}.service"
             for command, queue in suite_daemons(settings)]
    return [*units, AUDIT_TIMER] if audit_scheduled(settings) else units


def audit_scheduled(settings: Settings) -> bool:
    """Whether ``[audit]`` schedules an audit that has something to look at: directories of sources (its own, or
    the feeders'), or copies a queue stores."""
    audit = settings.audit
    stores = any(entry.partition(":")[0] in STORING_ACTIONS for queue in settings.queues.values()
                 for entry in queue.actions)
    return audit.enabled and bool(audit.directories or settings.feed.directories or (audit.copies and stores))


def write_schedule(settings: Settings, output_dir: str | os.PathLike[str]) -> None:
    """``[audit] when`` as a drop-in of the audit's timer in a generator's ``output_dir`` (its ``OnCalendar=``
    emptied first, so the settings' replaces the unit's default instead of adding to it)."""
    folder = Path(output_dir) / f"{AUDIT_TIMER}.d"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["# Written by dataq-generator from [audit] when.", "[Timer]", "OnCalendar=",
             f"OnCalendar={settings.audit.when}"]
    (folder / SCHEDULE_DROP_IN).write_text("\n".join(lines) + "\n")


def template_of(unit: str) -> str:
    """The unit file ``unit`` is loaded from: its template for an instance."""
    prefix, at, rest = unit.partition("@")
    return f"{prefix}@{rest[rest.rindex('.'):]}" if at else unit


def prepare_wants(output_dir: str | os.PathLike[str]) -> None:
    """The suite's (empty) wants directories in a generator's ``output_dir``: made before the settings are read,
    so that settings that fail to load still leave a trace of the generator having run."""
    for suite_unit in SUITE_UNITS:
        (Path(output_dir) / f"{suite_unit}.wants").mkdir(parents=True, exist_ok=True)


def write_wants(units: Sequence[str], output_dir: str | os.PathLike[str],
                unit_dirs: Sequence[str] = UNIT_DIRS) -> list[str]:
    """Make the suite's units want ``units`` in a generator's ``output_dir``; returns the problems (a unit whose
    file is in none of ``unit_dirs`` is left out, and named)."""
    problems = []
    found: dict[str, Path] = {}
    for unit in units:
        template = template_of(unit)
        path = next((Path(d) / template for d in unit_dirs if (Path(d) / template).is_file()), None)
        if path is None:
            problems.append(f"{template} is in none of {', '.join(unit_dirs)}: {unit} is not started "
                            "(make install-systemd installs it)")
        else:
            found[unit] = path
    prepare_wants(output_dir)
    for suite_unit in SUITE_UNITS:
        wants = Path(output_dir) / f"{suite_unit}.wants"
        for unit, path in found.items():
            link = wants / unit
            link.unlink(missing_ok=True)  # a generator's directory may hold the last run's links
            link.symlink_to(path)
    return problems


def stale_units(units: Sequence[str], generated_dir: str | os.PathLike[str] = GENERATED_DIR) -> list[str]:
    """Of ``units``, those the last generator run did not make wanted, or the other way round: the settings
    changed since the last ``systemctl daemon-reload``. Empty when nothing was generated at all (no systemd)."""
    wants = Path(generated_dir) / f"{SUITE_UNITS[0]}.wants"
    if not wants.is_dir():
        return []
    generated = {entry.name for entry in wants.iterdir()}
    return sorted(generated.symmetric_difference(units))
