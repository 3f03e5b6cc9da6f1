"""rsync as ``network_move`` runs it: destinations, one process per batch of files, and what its exit says.

Two calls serve a batch. :func:`send` transfers a list of files (``--files-from``) from a staging tree of
symlinks laid out as the destination will be (or from the sources' own directory, when they lie there at their
layout paths already), so one rsync names each file by its layout path, whatever its source is called, and says
which files it transferred. :func:`remote_digests` is a dry-run fetch of a list of
paths from the destination into an empty directory with ``--checksum --checksum-choice=md5`` (or ``xxh128``):
the far side reads each file it holds and reports its digest, while nothing is read on this side and no data
moves. rsync offers no way to keep a connection across calls, so a batch costs one rsync process, and one more
when some of its files must be checked at the destination.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dataq.checksum import DEFAULT_ALGORITHM, HEX_DIGITS
from dataq.errors import ActionError, Retryable
from dataq.runtime import spawn
from dataq.runtime.children import dying_with_parent

STDERR_TAIL_LINES = 5
"""Lines of rsync's stderr quoted in a failure (its last lines say what went wrong)."""
VERIFY_MARK = "dataq-verify"
"""Prefixes the lines of the verifying rsync that describe a file, so nothing else it prints is parsed."""
SENT_MARK = "dataq-sent"
"""Prefixes the lines of the sending rsync that describe a file it transferred."""
REMOTE_ALGORITHMS = frozenset({"md5", "xxh128"})
HEX_WIDTH = {algorithm: HEX_DIGITS[algorithm] for algorithm in REMOTE_ALGORITHMS}
"""Checksums rsync (3.2.3 and later) reports of a file, as dataq writes them (its xxh128 is XXH3-128's canonical
hex)."""
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
RSYNC_PROTOCOL_START = 5
"""Exit status of an rsync whose client-server protocol did not start: a daemon's refusal (an ``@ERROR:`` line),
another server on the port (settings to mend), or a connection that closed before any greeting (a relay, a load
balancer or a tunnel with no daemon behind it now: an outage)."""
RSYNC_PARTIAL = frozenset({23, 24})
"""Exit statuses after which some files of a batch may have arrived: each file is then judged on its own."""
WORK_PREFIX = "dataq-move-"
"""A batch's work directory is ``<tmp>/dataq-move-<pid>-<random>``."""
RSYNC_BUSY_OR_FULL = ("max connections", "No space left on device", "Disk quota exceeded")
"""Words of rsync's stderr that mean the far side cannot take the file for now (a daemon at its connection
limit, a full disk): outages an operator or time cures, not faults of the record."""
# Names never start with "-": ssh would take such a host or user for an option.
_HOST = r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\])"
_USER = r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?"
_RSYNC_URL = re.compile(rf"rsync://{_USER}(?P<host>{_HOST})(?::(?P<port>[0-9]{{1,5}}))?/[A-Za-z0-9_.-]+(?:/\S*)?")
DAEMON_PORT = 873
_SSH_TARGET = re.compile(rf"{_USER}{_HOST}:(?!//)\S*")
_MKPATH_RACE = re.compile(r'mkdir "[^"\n]*" (?:\(in [^)\n]*\) )?failed: File exists \(17\)')
"""What rsync says when its ``--mkpath`` lost a race: two rsyncs making the same missing directory at once (two
batches to a new destination), the one that finds it made by the other fails (exit status 11) instead of using
it. The directory is there then, so the send is run again, once."""
_NO_GREETING = re.compile(r"^rsync: (did not see server greeting|didn't get server startup line)", re.MULTILINE)
"""How rsync says that the connection to a daemon closed before any greeting: not a daemon's refusal (an
``@ERROR:`` line), nor another server on the port (``server sent "SSH-2.0..." rather than greeting``), both
settings to mend."""
_AT_CAP = re.compile(r"^@ERROR: max connections \(\d+\) reached", re.MULTILINE)
"""How an rsync daemon refuses a connection past a module's ``max connections``."""
_ESCAPED = re.compile(rb"\\#([0-7]{3})")
"""rsync prints a byte of a name it cannot show (a control character, non-ASCII) as ``\\#ooo``."""


def destination_kind(destination: str) -> str:
    """``daemon``, ``ssh`` or ``local``; ValueError for anything else."""
    if any(ch.isspace() or ord(ch) < 0x20 for ch in destination):
        raise ValueError(f"destination {destination!r} contains whitespace or a control character")
    if destination.startswith("rsync://"):
        found = _RSYNC_URL.fullmatch(destination)
        if found is None:
            raise ValueError(f"destination {destination!r} is not rsync://[user@]host[:port]/module[/path]")
        if found["port"] is not None and not 0 < int(found["port"]) < 65536:
            raise ValueError(f"destination {destination!r}: port {int(found['port'])} is not one of 1 to 65535")
        return "daemon"
    if destination.startswith("/"):
        return "local"
    if _SSH_TARGET.fullmatch(destination) is None:
        raise ValueError(f"destination {destination!r} is neither rsync://host[:port]/module/path, "
                         "[user@]host:path nor an absolute path")
    return "ssh"


@dataclass(frozen=True, slots=True)
class DaemonAddress:
    host: str
    port: int


def daemon_address(destination: str) -> DaemonAddress | None:
    """The host and port of the daemon of an ``rsync://`` destination (None: not one, or not a valid one)."""
    found = _RSYNC_URL.fullmatch(destination)
    if found is None:
        return None
    return DaemonAddress(found["host"].strip("[]"), int(found["port"]) if found["port"] else DAEMON_PORT)


def join(destination: str, relative: str) -> str:
    """``relative`` beneath ``destination`` (``""``: the destination as a directory, with its trailing slash)."""
    return destination + relative if destination.endswith(":") else f"{destination.rstrip('/')}/{relative}"


@dataclass(frozen=True, slots=True)
class Completed:
    status: int
    stdout: str
    stderr: str

    def about(self, name: str | None) -> str:
        """The lines of stderr that name ``name`` (what rsync said of that file), else its last lines."""
        lines = self.stderr.strip().splitlines()
        own = [line for line in lines if name is not None and name in line]
        return " | ".join(own or lines[-STDERR_TAIL_LINES:])

    def describe(self, what: str, name: str | None = None) -> str:
        meaning = RSYNC_EXIT_MEANINGS.get(self.status, "")
        said = self.about(name)
        return f"{what} failed with exit status {self.status}{f' ({meaning})' if meaning else ''}" \
               f"{f': {said}' if said else ''}"

    @property
    def at_cap(self) -> bool:
        """Whether an rsync daemon refused this call for being at its ``max connections`` (its own words, not a
        file name holding them)."""
        return self.status != 0 and _AT_CAP.search(self.stderr) is not None

    @property
    def unreachable(self) -> bool:
        """The far side could not be reached or could not take files for now (an outage, not a fault)."""
        if self.status == RSYNC_PROTOCOL_START and _NO_GREETING.search(self.stderr) is not None:
            return True  # the connection closed before anything spoke: nothing that answers is there
        return self.status in RSYNC_UNREACHABLE or any(sign in self.stderr for sign in RSYNC_BUSY_OR_FULL)

    def failure(self, what: str, destination: str, name: str | None = None) -> ActionError:
        """The error of this failed run: Retryable when :attr:`unreachable`, an outage of ``destination``."""
        message = self.describe(what, name)
        return Retryable(message, destination=destination) if self.unreachable else ActionError(message)


RunCommand = Callable[[list[str]], Awaitable[Completed]]
"""How a call is run: :func:`run_command`, or through an action's
:class:`~dataq.actions.connections.Connections`."""


async def run_command(argv: list[str]) -> Completed:
    """Run ``argv`` (never through a shell) to completion; a cancelled caller kills its whole process group.

    rsync forks helpers (its receiver, ssh), so the group is killed, not only the process we started. A pop
    daemon that dies (SIGKILL, a forced exit) cannot kill it: the kernel sends it SIGTERM then, so no transfer
    runs on without the daemon that would record it.
    """
    armed, preexec = dying_with_parent(argv, signal.SIGTERM)
    if preexec is None and spawn.AVAILABLE:
        # posix_spawn, not a fork of the daemon (see dataq.runtime.spawn): one start per batch, per record in a
        # trickle.
        try:
            finished = await spawn.run_to_end(armed)
        except OSError as exc:
            raise ActionError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        return Completed(finished.returncode, os.fsdecode(finished.stdout), finished.stderr.decode(errors="replace"))
    try:
        process = await asyncio.create_subprocess_exec(
            *armed, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=preexec,
        )
    except OSError as exc:
        raise ActionError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    try:
        stdout, stderr = await process.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.shield(_reaped(process))
        raise
    assert process.returncode is not None
    return Completed(process.returncode, os.fsdecode(stdout), stderr.decode(errors="replace"))


async def _reaped(process: asyncio.subprocess.Process) -> None:
    """Wait up to :data:`~dataq.runtime.spawn.KILL_WAIT` seconds for a killed child to be reaped (shielded by the
    caller: a second cancel must not leave a zombie)."""
    async with asyncio.timeout(spawn.KILL_WAIT):
        await process.wait()


def _unescape(name: str) -> str:
    return os.fsdecode(_ESCAPED.sub(lambda match: bytes([int(match[1], 8)]), os.fsencode(name)))


def make_work_dir() -> str:
    """A new work directory for a batch (its symlink tree and file lists), named for this process so that
    :func:`remove_stale_work_dirs` can tell when its owner is gone."""
    return tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-")


def remove_stale_work_dirs(tmp: str | None = None) -> list[str]:
    """Remove the work directories that killed pop daemons left (their process id no longer runs); their paths."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    for entry in os.listdir(tmp):
        pid = entry[len(WORK_PREFIX):].partition("-")[0]
        if entry.startswith(WORK_PREFIX) and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(os.path.join(tmp, entry), ignore_errors=True)
            removed.append(os.path.join(tmp, entry))
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_list(path: str, names: Sequence[str]) -> None:
    """The ``--files-from`` file of ``names``, NUL-separated (``--from0``) so any name is one entry."""
    with open(path, "wb") as listing:
        listing.write(b"".join(os.fsencode(name) + b"\0" for name in names))


async def send(base: list[str], tree: str, listing: str, destination: str, *, mkpath: bool,
               ignore_times: bool, run: RunCommand = run_command) -> tuple[set[str], Completed]:
    """Transfer the files ``listing`` names from ``tree`` (a tree of symlinks, or the sources' own directory) to
    ``destination``, each to its path there; the names of the files it transferred, and how it ended. Without
    ``ignore_times``, a file that is there with the same size and time is not transferred.

    rsync checks each file it transfers end to end: the receiver computes the whole-file checksum of what it
    wrote and compares it with the sender's of what it read, and sends the file again (or fails) on a mismatch.
    """
    argv = [*base[:1], "--copy-links", "--times", *(["--mkpath"] if mkpath else []),
            *(["--ignore-times"] if ignore_times else []), f"--files-from={listing}", "--from0",
            f"--out-format={SENT_MARK} %i %n", *base[1:], "--", f"{tree.rstrip('/')}/", join(destination, "")]
    result = await run(argv)
    if mkpath and result.status == 11 and _MKPATH_RACE.search(result.stderr):
        result = await run(argv)
    transferred = set()
    for line in _marked(result.stdout, SENT_MARK):
        change, _, name = line.partition(" ")
        if change[:2] in ("<f", ">f"):  # a file sent (to a remote) or received (a local copy)
            transferred.add(_unescape(name))
    return transferred, result


def _marked(output: str, mark: str) -> list[str]:
    """The lines rsync printed with ``--out-format`` starting with ``mark``, without it; a newline in a name is
    escaped, other line breaks are not, so lines are split on newlines only."""
    prefix = f"{mark} "
    return [line[len(prefix):] for line in output.split("\n") if line.startswith(prefix)]


def remote_algorithm(algorithm: str) -> str:
    """The checksum rsync reports of a copy for records of ``algorithm``: the same when rsync has it, else md5
    (which the source's read then computes beside the record's own)."""
    return algorithm if algorithm in REMOTE_ALGORITHMS else DEFAULT_ALGORITHM


async def remote_digests(base: list[str], listing: str, destination: str, scratch: str,
                         algorithm: str = DEFAULT_ALGORITHM, *,
                         run: RunCommand = run_command) -> tuple[dict[str, str], Completed]:
    """The digest (``algorithm``: one of :data:`REMOTE_ALGORITHMS`) of each file ``listing`` names that
    ``destination`` holds, read there (a dry-run fetch into the empty directory ``scratch``); a file it does not
    hold is missing from the result."""
    argv = [*base[:1], "--dry-run", "--checksum", f"--checksum-choice={algorithm}", f"--files-from={listing}",
            "--from0",
            f"--out-format={VERIFY_MARK} %C %n", *base[1:], "--", join(destination, ""), f"{scratch.rstrip('/')}/"]
    result = await run(argv)
    found: dict[str, str] = {}
    for line in _marked(result.stdout, VERIFY_MARK):
        if not line.endswith("/"):  # directories have no checksum
            # The digest has its fixed width (spaces for a file that is not a regular one), then one space.
            width = HEX_WIDTH[algorithm]
            found[_unescape(line[width + 1:])] = line[:width].strip().lower()
    return found, result
