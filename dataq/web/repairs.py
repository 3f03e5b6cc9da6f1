"""Repairs started from the console: ``dataq audit --repair`` for one audited target, run as the command line runs
it, within the same brakes (``--max-repair``'s default; never ``--force`` from a browser).

A repair is a child process, not a call into the audit library: it reads the settings file as an operator's
command would, its output is the command's, and a console that stops does not cut it short (it runs in a session
of its own and finishes alone). What each target's last repair did is kept here, in one object with named
transitions (:meth:`Repairs.start`, :meth:`Repairs._finish`), for the queue page to show.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dataq.config import Settings
from dataq.embedded.suite import daemon_argv
from dataq.errors import DataqError
from dataq.logs import get_logger

OUTPUT_KEPT = 40
"""Lines of a repair's output kept for the page (the command's log has it all)."""
EXIT_MEANINGS = {0: "nothing left to repair", 1: "repaired what it could; see what it found",
                 2: "refused (the brakes) or could not run: nothing was changed"}

log = get_logger()


class RepairRefused(DataqError):
    """A repair the console will not start: a target not audited, one being repaired, or no settings file."""


@dataclass(slots=True)
class RepairRun:
    """One target's last repair from the console."""

    queue: str
    target: str
    who: str
    started: float
    finished: float | None = None
    status: int | None = None
    output: list[str] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.finished is None

    def doc(self) -> dict[str, Any]:
        return {"queue": self.queue, "target": self.target, "who": self.who, "started": self.started,
                "finished": self.finished, "running": self.running, "status": self.status,
                "meaning": None if self.status is None else EXIT_MEANINGS.get(self.status, "failed"),
                "output": self.output}


def repair_argv(settings: Settings, queue: str, target: str) -> list[str]:
    """``dataq audit --repair`` for ``target`` (``dir:PATH`` or ``copies:ROOT``) of ``queue``."""
    if settings.source is None:
        raise RepairRefused("the console runs without a settings file, which the repair needs: run "
                            "`dataq audit --repair` on this host")
    kind, _, where = target.partition(":")
    argv = [*daemon_argv("audit", queue, settings.source), "--repair"]
    if kind == "dir" and where:
        return [*argv, "--", where]  # a path that begins with '-' is a path, not a switch
    if kind == "copies" and where:
        # The command audits the copies of every storing root of the queue: ROOT's among them.
        return [*argv, "--copies"]
    raise RepairRefused(f"{target!r} is not an audited directory (dir:PATH) or storing root (copies:ROOT)")


class Repairs:
    """The repairs started from this console, the last one per (queue, target)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runs: dict[tuple[str, str], RepairRun] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def of(self, queue: str) -> Mapping[str, RepairRun]:
        """The last repair of each target of ``queue``."""
        return {target: run for (name, target), run in self.runs.items() if name == queue}

    async def start(self, queue: str, target: str, audited: Mapping[str, object], who: str) -> RepairRun:
        """Start repairing ``target``, one of ``audited`` (the queue's last audits)."""
        if target not in audited:
            raise RepairRefused(f"no audit of {target!r} is known for queue {queue!r}: audit it first")
        last = self.runs.get((queue, target))
        if last is not None and last.running:
            since = time.strftime("%H:%M:%S", time.localtime(last.started))
            raise RepairRefused(f"{target} is being repaired since {since}, started by {last.who}")
        argv = repair_argv(self.settings, queue, target)
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        run = self.runs[(queue, target)] = RepairRun(queue, target, who, time.time())
        log.info("audit repair started from the web console", queue=queue, target=target, who=who, pid=process.pid)
        task = asyncio.create_task(self._finish(run, process))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def _finish(self, run: RepairRun, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        lines: list[str] = []
        async for raw in process.stdout:
            lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
            del lines[:-OUTPUT_KEPT]
        run.status, run.output, run.finished = await process.wait(), lines, time.time()
        log.info("audit repair from the web console ended", queue=run.queue, target=run.target, who=run.who,
                 status=run.status, meaning=EXIT_MEANINGS.get(run.status, "failed"))

    async def wait(self, grace: float) -> None:
        """Let the repairs running end within ``grace`` seconds (on shutdown; those still running go on alone)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)


__all__ = ["RepairRefused", "RepairRun", "Repairs", "repair_argv"]
