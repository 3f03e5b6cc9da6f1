"""``network_move``: send each record's file to another host with rsync, verify it there, optionally hand the
record on to the next site's dataq, then optionally remove the source.

Options (``[queues.NAME.network_move]``):

``destination`` (required)
    Directory the files go to: ``rsync://[user@]host[:port]/module[/path]`` (an rsync daemon),
    ``[user@]host:path`` (rsync over SSH; ``extra_args = ["-e", "ssh -i KEY"]`` to choose how), or an absolute
    local path (a mounted filesystem).
``layout`` (default ``"{name}"``)
    Path of the file beneath ``destination``; the placeholders of ``disk_store``'s layout.
``create_dirs`` (default true)
    Create the target's missing directories (``--mkpath``: rsync 3.2.3 or later on both ends; turn it off for
    an older rsync and a destination whose directories exist).
``rsync`` (default ``"rsync"``), ``extra_args`` (default none)
    The rsync program and arguments added to every call (``--bwlimit=...``, ``--password-file=...``).
``algorithm`` (default ``"md5"``)
    hashlib name of the records' checksum.
``verify`` (default true)
    Verify the file at the destination after the transfer (see below).
``remove_source`` (default false)
    Delete the source once the file is verified at the destination and, with ``next_sites``, handed on.
``io_timeout`` (default 60)
    Seconds rsync may see no data before it gives up (its ``--timeout`` and, for a daemon, ``--contimeout``).
``timeout`` (default: the queue's ``action_timeout``)
    Seconds one record may take in all; a transfer still running then is killed.
``next_sites`` (default none), ``next_path``, ``handon_timeout`` (default 10)
    ``host:port`` of the next site's dataq push daemons. After a verified transfer the record, with its path
    there (``next_path``: an absolute template with the layout's placeholders and ``{relpath}``, the file's
    path beneath ``destination``), is pushed to the first that answers within ``handon_timeout`` seconds; its
    ``Pushed`` or ``Ignored`` reply makes the hand-on good, an ``Error:`` reply fails the record with that
    message. A site that cannot be reached or does not answer in time is skipped for the next one.

What is verified: before sending, the source's size and checksum must match the record (a bad source is
never sent, so it cannot overwrite a good copy). The transfer uses ``--checksum`` (a retry of a file already
there sends nothing) and rsync writes under a temporary name that it renames when complete. With ``verify``, a
second, dry-run rsync with ``--checksum --checksum-choice=md5`` makes the receiving side read the file back
from its disk and compare its full md5 with the md5 the sending side computes of the source; the destination
counts as verified only if rsync finds nothing to send and, for md5 records, that md5 is the record's (so the
destination holds the record's bytes, not merely whatever the source holds by then). Records of another
algorithm are verified against the source, itself checked against the record before the transfer.

A record whose source is gone (this action removed it, then the daemon died before the record was
acknowledged) succeeds if the destination holds its data: a dry-run fetch makes the far side report the md5
of its file, which must be the record's (md5 records only; others fail as a missing source).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass

from dataq.checksum import DEFAULT_ALGORITHM, check_algorithm
from dataq.config import MAX_PORT
from dataq.errors import ActionError, DataqError, Retryable
from dataq.feed.client import Feeder
from dataq.logs import get_logger
from dataq.protocol import ReplyKind
from dataq.record import Record
from dataq.runtime.children import die_with_parent

from .base import Action
from .files import SourceMismatch, check_source_sync, in_thread, remove_source_sync
from .layout import LAYOUT_FIELDS, check_layout, record_values, render

DEFAULT_LAYOUT = "{name}"
DEFAULT_IO_TIMEOUT = 60.0
DEFAULT_HANDON_TIMEOUT = 10.0
NEXT_PATH_FIELDS = LAYOUT_FIELDS | {"relpath"}
STDERR_TAIL_LINES = 5
"""Lines of rsync's stderr quoted in a failure (its last lines say what went wrong)."""
KILL_WAIT = 5.0
"""Seconds to wait for a killed rsync to be reaped."""
VERIFY_MARK = "dataq-verify"
"""Prefixes the lines of the verifying rsync that describe the file, so nothing else it prints is parsed."""
RSYNC_EXIT_MEANINGS = {
    1: "syntax or usage error", 2: "protocol incompatibility", 3: "errors selecting input/output files",
    5: "error starting client-server protocol", 10: "error in socket I/O", 11: "error in file I/O",
    12: "error in rsync protocol data stream", 20: "received SIGUSR1 or SIGINT",
    23: "partial transfer due to error", 24: "partial transfer due to vanished source files",
    30: "timeout in data send/receive", 35: "timeout waiting for daemon connection",
}
RSYNC_UNREACHABLE = frozenset({10, 12, 30, 35, 255})
"""Exit statuses that mean the far side could not be reached or went away: socket I/O (a refused connection),
a broken protocol stream (the peer died), the two timeouts, and ssh's own failure."""
RSYNC_BUSY_OR_FULL = ("max connections", "No space left on device", "Disk quota exceeded")
"""Words of rsync's stderr that mean the far side cannot take the file for now (a daemon at its connection
limit, a full disk): outages an operator or time cures, not faults of the record."""
# Names never start with "-": ssh would take such a host or user for an option.
_HOST = r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\])"
_USER = r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?"
_RSYNC_URL = re.compile(rf"rsync://{_USER}{_HOST}(?::[0-9]{{1,5}})?/[A-Za-z0-9_.-]+(?:/\S*)?")
_SSH_TARGET = re.compile(rf"{_USER}{_HOST}:(?!//)\S*")
_SITE = re.compile(rf"(?P<host>{_HOST}):(?P<port>[0-9]{{1,5}})")

log = get_logger()


def destination_kind(destination: str) -> str:
    """``daemon``, ``ssh`` or ``local``; ValueError for anything else."""
    if any(ch.isspace() or ord(ch) < 0x20 for ch in destination):
        raise ValueError(f"destination {destination!r} contains whitespace or a control character")
    if destination.startswith("rsync://"):
        if _RSYNC_URL.fullmatch(destination) is None:
            raise ValueError(f"destination {destination!r} is not rsync://[user@]host[:port]/module[/path]")
        return "daemon"
    if destination.startswith("/"):
        return "local"
    if _SSH_TARGET.fullmatch(destination) is None:
        raise ValueError(f"destination {destination!r} is neither rsync://host[:port]/module/path, "
                         "[user@]host:path nor an absolute path")
    return "ssh"


def parse_site(site: str) -> tuple[str, int]:
    """(host, port) of a ``host:port`` next site (``[v6-address]:port`` too); ValueError if malformed."""
    match = _SITE.fullmatch(site)
    if match is None or not 0 < int(match["port"]) <= MAX_PORT:
        raise ValueError(f"next site {site!r} is not host:port")
    return match["host"].strip("[]"), int(match["port"])


def _join(destination: str, relative: str) -> str:
    return destination + relative if destination.endswith(":") else f"{destination.rstrip('/')}/{relative}"


@dataclass(frozen=True, slots=True)
class NetworkMoveOptions:
    destination: str
    """Where files go: ``rsync://host[:port]/module/path``, ``[user@]host:path`` or an absolute path."""
    layout: str = DEFAULT_LAYOUT
    """The file's path beneath ``destination``."""
    create_dirs: bool = True
    """Create missing directories of the target (``--mkpath``: rsync 3.2.3 or later on both ends)."""
    rsync: str = "rsync"
    """The rsync program."""
    extra_args: tuple[str, ...] = ()
    """Arguments added to every rsync call."""
    algorithm: str = DEFAULT_ALGORITHM
    """hashlib name of the records' checksum."""
    verify: bool = True
    """Verify the file at the destination after the transfer."""
    remove_source: bool = False
    """Delete the source once the file is verified (and handed on)."""
    io_timeout: float = DEFAULT_IO_TIMEOUT
    """Seconds without data before rsync gives up."""
    timeout: float | None = None
    """Seconds one record may take (None: the queue's ``action_timeout``)."""
    next_sites: tuple[str, ...] = ()
    """``host:port`` push daemons of the next site, tried in order."""
    next_path: str | None = None
    """The record's path at the next site: an absolute template (needed with ``next_sites``)."""
    handon_timeout: float = DEFAULT_HANDON_TIMEOUT
    """Seconds a next site has to answer before the next one is tried."""

    def __post_init__(self) -> None:
        destination_kind(self.destination)
        check_layout(self.layout)
        check_algorithm(self.algorithm)
        for name in ("io_timeout", "handon_timeout", "timeout"):
            value = getattr(self, name)
            if value is not None and not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        for site in self.next_sites:
            parse_site(site)
        if self.next_sites and self.next_path is None:
            raise ValueError("next_sites needs next_path: the record's path at the next site")
        if self.next_path is not None:
            check_layout(self.next_path, NEXT_PATH_FIELDS, absolute=True)


@dataclass(frozen=True, slots=True)
class Completed:
    status: int
    stdout: str
    stderr: str


async def run_command(argv: list[str]) -> Completed:
    """Run ``argv`` (never through a shell) to completion; a cancelled caller kills its whole process group.

    rsync forks helpers (its receiver, ssh), so the group is killed, not only the process we started. A pop
    daemon that dies (SIGKILL, a forced exit) cannot kill it: the kernel sends it SIGTERM then, so no transfer
    runs on without the daemon that would record it.
    """
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM),
        )
    except OSError as exc:
        raise ActionError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    try:
        stdout, stderr = await process.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.shield(asyncio.wait_for(process.wait(), KILL_WAIT))
        raise
    assert process.returncode is not None
    return Completed(process.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace"))


def _failure(what: str, result: Completed, destination: str) -> ActionError:
    """The error of a failed rsync: Retryable when the far side could not be reached or could not take the file
    for now (:data:`RSYNC_UNREACHABLE`, :data:`RSYNC_BUSY_OR_FULL`), which is an outage of ``destination``."""
    meaning = RSYNC_EXIT_MEANINGS.get(result.status, "")
    tail = " | ".join(result.stderr.strip().splitlines()[-STDERR_TAIL_LINES:])
    message = f"{what} failed with exit status {result.status}{f' ({meaning})' if meaning else ''}" \
              f"{f': {tail}' if tail else ''}"
    if result.status in RSYNC_UNREACHABLE or any(sign in result.stderr for sign in RSYNC_BUSY_OR_FULL):
        return Retryable(message, destination=destination)
    return ActionError(message)


class NetworkMoveAction(Action[NetworkMoveOptions]):
    """Transfer each record's file with rsync, verify it, hand it on (see the module docstring)."""

    name = "network_move"
    Options = NetworkMoveOptions

    async def start(self) -> None:
        # A missing rsync is a set-up mistake to report at start-up, not once per record.
        if shutil.which(self.options.rsync) is None:
            raise ActionError(f"network_move: rsync program {self.options.rsync!r} not found")

    def destination(self, record: Record) -> str | None:
        return self.options.destination

    def _rsync_args(self) -> list[str]:
        options = self.options
        seconds = str(max(1, round(options.io_timeout)))
        args = [options.rsync, "--checksum", f"--timeout={seconds}"]
        if destination_kind(options.destination) == "daemon":
            args.append(f"--contimeout={seconds}")
        return [*args, *options.extra_args]

    async def run(self, record: Record) -> None:
        options = self.options
        values = record_values(record)
        relative = render(options.layout, values)
        target = _join(options.destination, relative)
        if await asyncio.to_thread(os.path.lexists, record.path):
            await self._send(record, target)
        else:
            # A retry after this action removed the source but before the record was acknowledged (a crash):
            # the move is done if the destination holds the record's data.
            await self._check_remote_only(record, target)
        if options.next_sites:
            assert options.next_path is not None
            await self.hand_on(record, render(options.next_path, {**values, "relpath": relative}, absolute=True))
        if options.remove_source:
            await asyncio.to_thread(remove_source_sync, record.path)
        log.info("moved", id=record.id, target=target, verified=options.verify, handed_on=bool(options.next_sites),
                 source_removed=options.remove_source)

    async def _send(self, record: Record, target: str) -> None:
        options = self.options
        await in_thread(lambda abort: check_source_sync(record, options.algorithm, abort))
        mkpath = ["--mkpath"] if options.create_dirs else []
        result = await run_command([*self._rsync_args(), "--times", *mkpath, "--", record.path, target])
        if result.status != 0:
            raise _failure(f"rsync of {record.path} to {target}", result, options.destination)
        if not options.verify:
            return
        item, reported = await self._describe(
            [*self._rsync_args(), "--times", "--dry-run", "--itemize-changes", "--itemize-changes", "--", record.path,
             target], f"verification of {target}")
        if not item.startswith(".f"):
            raise ActionError(f"verification of {target} failed: the destination differs from the source "
                              f"(rsync itemizes {item})")
        # rsync reports the md5 it verified with; records of other algorithms are checked against the source.
        if options.algorithm == "md5" and reported.lower() != record.checksum.lower():
            raise ActionError(f"verification of {target} failed: checksum {reported or '(none)'}, "
                              f"the record says {record.checksum}")

    async def _check_remote_only(self, record: Record, target: str) -> None:
        if self.options.algorithm != "md5":  # rsync can report md5 only
            raise SourceMismatch(f"source file {record.path} does not exist")
        # A dry-run fetch into an empty directory: the far side reads its file and reports its md5; no data moves.
        scratch = await asyncio.to_thread(tempfile.mkdtemp, prefix="dataq-check-")
        try:
            _, reported = await self._describe([*self._rsync_args(), "--dry-run", "--", target, f"{scratch}/"],
                                               f"source file {record.path} does not exist; checking {target}")
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)
        if reported.lower() != record.checksum.lower():
            raise SourceMismatch(f"source file {record.path} does not exist and {target} holds other data "
                                 f"(checksum {reported or '(none)'})")

    async def _describe(self, argv: list[str], what: str) -> tuple[str, str]:
        """Run a dry-run rsync that itemizes the one file; its change summary (``%i``) and md5 (``%C``)."""
        argv = [*argv[:1], "--checksum-choice=md5", f"--out-format={VERIFY_MARK} %i %C", *argv[1:]]
        result = await run_command(argv)
        if result.status != 0:
            raise _failure(what, result, self.options.destination)
        lines = [line.split() for line in result.stdout.splitlines() if line.startswith(f"{VERIFY_MARK} ")]
        if len(lines) != 1 or len(lines[0]) < 2:
            raise ActionError(f"{what}: rsync did not describe the file ({result.stdout.strip()!r})")
        return lines[0][1], lines[0][2] if len(lines[0]) > 2 else ""

    async def hand_on(self, record: Record, path: str) -> None:
        """Push ``record`` as ``path`` to the first next site that answers; ActionError if none accepts it."""
        handed = Record(path=path, checksum=record.checksum, size=record.size)
        problems: list[str] = []
        for site in self.options.next_sites:
            host, port = parse_site(site)
            # The default window: with a window of exactly one record the feeder would wait for more input.
            feeder = Feeder(host, port, retry_for=0.0)
            try:
                async with asyncio.timeout(self.options.handon_timeout):
                    result = await feeder.feed([handed])
            except TimeoutError:
                problems.append(f"{site}: no answer within {self.options.handon_timeout:g}s")
                continue
            except DataqError as exc:  # unreachable, or not speaking the push protocol
                problems.append(f"{site}: {exc}")
                continue
            assert result.replies is not None
            (reply,) = result.replies
            if reply.kind is ReplyKind.ERROR:
                raise ActionError(f"next site {site} refused the record: {reply.detail}")
            log.info("handed on", id=record.id, site=site, path=path, reply=str(reply))
            return
        # Every site unreachable or silent: an outage of the next sites, not a fault of the record.
        raise Retryable(f"no next site took the record: {'; '.join(problems)}",
                        destination=f"next sites {', '.join(self.options.next_sites)}")

