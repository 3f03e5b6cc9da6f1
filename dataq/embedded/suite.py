"""``dataq run``: the whole suite in the foreground, each daemon a supervised child process.

Children rather than tasks in one process, because a daemon that crashes (or is killed) must not take the
others down, and because a pop daemon's actions may burn a CPU core of their own. The runner owns the embedded
redis-server when no Redis URL is configured (the caller starts it: :func:`dataq.embedded.locate.resolve_redis`),
restarts a child that dies with backoff, and on Ctrl-C or SIGTERM stops the children first (each drains its own
work) and Redis last.

Nothing outlives the runner. When it dies, even by SIGKILL, the kernel sends its daemons SIGUSR2 (a graceful stop
that repeats cannot force) and its redis-server SIGTERM (:mod:`dataq.runtime.children`). A second Ctrl-C or
SIGTERM while it stops (a terminal, ``make`` or ``timeout`` may deliver one to the process group and one to the
runner) kills the daemons and stops redis-server before the runner exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from dataq.config import CONFIG_ENV, REDIS_URL_ENV, Settings
from dataq.embedded.locate import RedisHandle
from dataq.logs import get_logger
from dataq.runtime.backoff import Backoff
from dataq.runtime.children import die_with_parent
from dataq.runtime.signals import PARENT_DIED, install_stop_signals
from dataq.runtime.supervise import EXIT_FAILED, Supervisor
from dataq.store import redis_address

CHILD_STOP_TIMEOUT_MARGIN = 10.0
"""Seconds a child gets beyond its own grace period and Redis wait to exit after SIGTERM, before SIGKILL."""
HEALTHY_AFTER = 30.0
"""A child that ran this long before dying is restarted at once again (its backoff is reset)."""
RESTART_BACKOFF_CAP = 30.0
FORCED_REDIS_STOP = 5.0
"""Seconds a forced exit gives redis-server to write its AOF and exit before it is killed too."""

log = get_logger()


@dataclass
class Child:
    """One daemon the runner keeps alive."""

    name: str
    argv: list[str]
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.5, cap=RESTART_BACKOFF_CAP))


def daemon_argv(command: str, queue: str | None, config: str | None) -> list[str]:
    """How to start ``dataq <command>`` (for ``queue``, if one; a feeder's is its directory) with the interpreter
    running us."""
    argv = [sys.executable, "-c", "from dataq.cli.main import main; main()", command]
    if queue is not None:
        argv += ["--watch" if command == "feed" else "--queue", queue]
    if config is not None:
        argv += ["--config", config]
    return argv


def suite_daemons(settings: Settings) -> list[tuple[str, str | None]]:
    """What the suite runs besides Redis, as (command, queue or None): a push daemon and a pop daemon for every
    configured queue, the web console unless ``[web] enabled`` is false, and a feeder for each of ``[feed]
    directories`` (its "queue" is the directory). ``dataq run`` starts them as its children, the systemd generator
    (:mod:`dataq.embedded.units`) as units."""
    daemons: list[tuple[str, str | None]] = [(command, name) for name in settings.queues for command in ("push", "pop")]
    if settings.web.enabled:
        daemons.append(("web", None))
    daemons += [("feed", directory) for directory in settings.feed.directories]
    return daemons


def daemon_name(command: str, queue: str | None) -> str:
    """How a daemon of the suite is named to a person: ``push:transfer``, ``web``."""
    return command if queue is None else f"{command}:{queue}"


def plan_children(settings: Settings) -> list[Child]:
    """A child for each of :func:`suite_daemons`."""
    return [Child(daemon_name(command, queue), daemon_argv(command, queue, settings.source))
            for command, queue in suite_daemons(settings)]


async def _keep_alive(child: Child, env: dict[str, str], stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.monotonic()
        try:
            child.process = await asyncio.create_subprocess_exec(
                # Its own session: a Ctrl-C meant for the runner must not hit the daemons under its orderly
                # shutdown.
                *child.argv, env=env, start_new_session=True, preexec_fn=die_with_parent(PARENT_DIED),
            )
        except OSError as exc:  # out of processes or descriptors for a moment: try again, as after a crash
            log.error("cannot start a daemon; retrying", daemon=child.name, error=str(exc))
            await child.backoff.wait(stop)
            continue
        log.info("daemon started", daemon=child.name, pid=child.process.pid)
        waiter = asyncio.ensure_future(child.process.wait())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if stop.is_set():
            waiter.cancel()
            return
        status = child.process.returncode
        if time.monotonic() - started > HEALTHY_AFTER:
            child.backoff.reset()
        child.restarts += 1
        log.error("daemon exited; restarting", daemon=child.name, status=status, restarts=child.restarts)
        await child.backoff.wait(stop)


async def _stop_child(child: Child, within: float) -> None:
    process = child.process
    if process is None or process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(within):
            await process.wait()
    except TimeoutError:
        log.warning("daemon did not stop in time; killing it", daemon=child.name, pid=process.pid)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    log.info("daemon stopped", daemon=child.name, status=process.returncode)


async def run_suite(
    settings: Settings, redis: RedisHandle, *, stop: asyncio.Event | None = None,
    children: Sequence[Child] | None = None,
) -> int:
    """Run every daemon on ``redis`` until stopped, then stop them; returns the exit status. The caller, which
    started ``redis``, closes it afterwards: Redis outlives the daemons."""
    plan = list(children) if children is not None else plan_children(settings)
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop, on_force=lambda: _force_stop(plan, redis))
    env = dict(os.environ)
    if redis_address(settings) is None:
        # Daemons attach to the very server this process found or started; sentinels they read from the settings.
        env[REDIS_URL_ENV] = redis.url
    # The very file this runner read, or none at all: a child must not find another by the default lookup.
    env[CONFIG_ENV] = settings.source or ""
    _announce(settings, redis.url, owned=redis.owned is not None)
    supervisor = Supervisor(stop)
    for child in plan:
        supervisor.start(child.name, functools.partial(_keep_alive, child, env, stop))
    await stop.wait()
    # All at once: each stops its intake and drains.
    await asyncio.gather(*supervisor.tasks, return_exceptions=True)
    timeout = settings.pop.grace_period + settings.pop.shutdown_redis_wait + CHILD_STOP_TIMEOUT_MARGIN
    await asyncio.gather(*(_stop_child(child, timeout) for child in plan))
    return 0 if supervisor.failed is None else EXIT_FAILED


def _force_stop(plan: Sequence[Child], redis: RedisHandle) -> None:
    """A second stop signal: no more waiting for the daemons (every state they leave is crash-safe); Redis still
    gets to write its AOF, briefly."""
    for child in plan:
        if child.process is not None and child.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.kill()
    if redis.owned is not None:
        redis.owned.stop(FORCED_REDIS_STOP)


def _announce(settings: Settings, url: str, *, owned: bool) -> None:
    redis_note = f"{url} (embedded, data in {settings.data_dir})" if owned else url
    lines = [f"dataq running — Redis: {redis_note}", f"  logs: {settings.log.resolved_dir(settings.data_dir)}"]
    for name in settings.queues:
        lines.append(f"  queue {name}: feed {settings.push.host}:{settings.push_port_for(name)}")
    lines.append("  stop with Ctrl-C; operate with dataq-cli --summary")
    print("\n".join(lines), file=sys.stderr, flush=True)
