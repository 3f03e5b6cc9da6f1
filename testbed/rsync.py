"""``rsync --daemon`` on a loopback port, the destination of ``network_move`` in tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from testbed.ports import unclaimed_port

LOOPBACK = "127.0.0.1"
DAEMON_START_TIMEOUT = 10.0
DAEMON_STOP_TIMEOUT = 5.0
DAEMON_START_ATTEMPTS = 3
"""A free port may be taken between choosing it and rsync binding it; try another then."""
LISTEN_STATE = "0A"
"""TCP_LISTEN in ``/proc/net/tcp``."""
TRANSFER_LOG_PREFIX = "dataq-test-transfer"


class RsyncDaemon:
    """``rsync --daemon`` in the foreground on a free loopback port, one writable module per directory."""

    def __init__(self, workdir: Path, modules: Mapping[str, Path], *, nodelay: bool = False,
                 max_connections: int = 0) -> None:
        self.workdir = workdir
        self.modules = dict(modules)
        self.nodelay = nodelay
        """The daemon's own ``socket options = TCP_NODELAY`` (what ``docs/actions.md`` advises; off: Debian's
        default configuration)."""
        self.max_connections = max_connections
        """Each module's ``max connections`` (0: unlimited, rsync's default); the daemon refuses a connection past
        it with "@ERROR: max connections (N) reached -- try again later"."""
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def received(self) -> list[str]:
        """The paths (as rsync names them, relative to the transfer's top) of every file received, in order."""
        log = self.workdir / "rsyncd.log"
        marker = f"{TRANSFER_LOG_PREFIX} recv "
        text = log.read_text(errors="replace") if log.exists() else ""
        return [line.split(marker, 1)[1] for line in text.splitlines() if marker in line]

    def url(self, module: str, path: str = "") -> str:
        return f"rsync://{LOOPBACK}:{self.port}/{module}/{path}".rstrip("/")

    def _write_config(self) -> Path:
        lines = [
            f"pid file = {self.workdir / 'rsyncd.pid'}",
            f"log file = {self.workdir / 'rsyncd.log'}",
            "use chroot = no",
            # As root the daemon would switch to "nobody", who cannot write the test's directories.
            f"uid = {os.getuid()}",
            f"gid = {os.getgid()}",
            "numeric ids = yes",
            # One "recv <module path>" line per file received, so a test can count arrivals.
            "transfer logging = yes",
            f"log format = {TRANSFER_LOG_PREFIX} %o %f",
            *(["socket options = TCP_NODELAY"] if self.nodelay else []),
        ]
        for name, path in self.modules.items():
            path.mkdir(parents=True, exist_ok=True)
            lines += [f"[{name}]", f"    path = {path}", "    read only = no", "    list = yes"]
            if self.max_connections:
                # The count lives in the lock file (default /var/run/rsyncd.lock): kept in the test's directory.
                lines += [f"    max connections = {self.max_connections}",
                          f"    lock file = {self.workdir / 'rsyncd.lock'}"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "rsyncd.conf"
        config.write_text("\n".join(lines) + "\n")
        return config

    def start(self, port: int | None = None) -> None:
        """Start listening, on ``port`` if given (a destination that comes back), else on a free port.

        The port lies below the ephemeral range (:func:`unclaimed_port`): while a destination is down, the
        kernel does not hand it out to another process's connection or daemon; should another test take it all
        the same, this fails rather than pass off that test's socket as the daemon's."""
        rsync = shutil.which("rsync")
        if rsync is None:
            raise RuntimeError("rsync is not installed (make install-test installs it)")
        config = self._write_config()
        for _ in range(1 if port else DAEMON_START_ATTEMPTS):
            self.port = port or unclaimed_port()
            self.process = subprocess.Popen(
                [rsync, "--daemon", "--no-detach", f"--config={config}", f"--port={self.port}",
                 f"--address={LOOPBACK}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
            if self._await_listening():
                return
            self.stop()
        log = (self.workdir / "rsyncd.log")
        raise RuntimeError(f"rsync --daemon did not start: {log.read_text() if log.exists() else ''}")

    def _await_listening(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + DAEMON_START_TIMEOUT
        while time.monotonic() < deadline and self.process.poll() is None:
            # Its own socket: another test's daemon answering on a port this one failed to bind would pass a
            # connect, and the test would then talk to it until its timeout.
            if _listens(self.process.pid, self.port):
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(DAEMON_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on loopback ``port`` (read from /proc, Linux)."""
    wanted = f"{socket.htonl(0x7F000001):08X}:{port:04X}"
    inodes = set()
    with open("/proc/net/tcp") as table:  # unreadable: an error, not a daemon that seems never to start
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[1] == wanted and fields[3] == LISTEN_STATE:
                inodes.add(f"socket:[{fields[9]}]")
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # it has exited
        return False
    for fd in descriptors:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
    return False


@contextlib.contextmanager
def rsync_daemon(workdir: Path, modules: Mapping[str, Path], *, max_connections: int = 0) -> Iterator[RsyncDaemon]:
    daemon = RsyncDaemon(workdir, modules, max_connections=max_connections)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()
