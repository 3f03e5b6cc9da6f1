"""What the storage and transfer action tests share: real files with their records, a real ``rsync --daemon``
on a loopback port, and a tiny tmpfs to fill up."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from dataq.embedded.redis_server import free_port
from dataq.record import Record

LOOPBACK = "127.0.0.1"
PUSHED_AT = 1404777600.0
"""2014-07-08 00:00 UTC, so ``{date}`` renders as 20140708."""
PUSHED_DATE = "20140708"
DAEMON_START_TIMEOUT = 10.0
DAEMON_STOP_TIMEOUT = 5.0
DAEMON_START_ATTEMPTS = 3
"""A free port may be taken between choosing it and rsync binding it; try another then."""
TINY_FS_BYTES = 64 * 1024
TRANSFER_LOG_PREFIX = "dataq-test-transfer"


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def make_file(directory: Path, name: str, data: bytes, *, pushed_at: float | None = PUSHED_AT) -> Record:
    """Write ``data`` to ``directory/name`` and return its record (as the push daemon would store it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    return Record(path=str(path), checksum=md5(data), size=len(data), pushed_at=pushed_at, source="test")


def hidden_leftovers(directory: Path) -> list[Path]:
    """Temporary files an interrupted copy could have left anywhere below ``directory``."""
    return [path for path in directory.rglob(".*") if path.is_file()]


class RsyncDaemon:
    """``rsync --daemon`` in the foreground on a free loopback port, one writable module per directory."""

    def __init__(self, workdir: Path, modules: Mapping[str, Path]) -> None:
        self.workdir = workdir
        self.modules = dict(modules)
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
        ]
        for name, path in self.modules.items():
            path.mkdir(parents=True, exist_ok=True)
            lines += [f"[{name}]", f"    path = {path}", "    read only = no", "    list = yes"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "rsyncd.conf"
        config.write_text("\n".join(lines) + "\n")
        return config

    def start(self, port: int | None = None) -> None:
        """Start listening, on ``port`` if given (a destination that comes back), else on a free port."""
        rsync = shutil.which("rsync")
        if rsync is None:
            pytest.skip("rsync is not installed")
        config = self._write_config()
        for _ in range(1 if port else DAEMON_START_ATTEMPTS):
            self.port = port or free_port()
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
            with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, self.port), timeout=0.5):
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


@contextlib.contextmanager
def rsync_daemon(workdir: Path, modules: Mapping[str, Path]) -> Iterator[RsyncDaemon]:
    daemon = RsyncDaemon(workdir, modules)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@contextlib.contextmanager
def tiny_filesystem(mountpoint: Path, size: int = TINY_FS_BYTES) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes at ``mountpoint``; skips the test where mounting is not allowed."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mountpoint)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=False)


class SilentServer:
    """A TCP server on loopback that accepts connections and never says a word (a hung peer).

    ``closed`` is set when a peer hangs up, so a test can see that a killed client really went away.
    """

    def __init__(self) -> None:
        self.port = 0
        self.closed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        with contextlib.suppress(OSError):
            while await reader.read(65536):
                pass
        self.closed.set()
        writer.close()
        self._writers.discard(writer)

    async def __aenter__(self) -> SilentServer:
        self._server = await asyncio.start_server(self._serve, LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()


def fake_ssh(directory: Path) -> Path:
    """A stand-in for ssh that runs the "remote" command here, so ``host:path`` destinations can be tested."""
    script = directory / "fake-ssh"
    script.write_text(
        "#!/bin/sh\n"
        "# rsync calls: fake-ssh [-l USER] [options] HOST COMMAND...\n"
        'while [ $# -gt 0 ]; do case "$1" in -l|-p|-i|-o) shift 2;; -*) shift;; *) break;; esac; done\n'
        'shift\nexec sh -c "$*"\n'
    )
    script.chmod(0o755)
    return script


def recording_rsync(directory: Path) -> tuple[Path, Path]:
    """An rsync that notes each time it is started, a line of its process id (the same once it execs the real
    rsync) and arguments: the program, and the file it notes in."""
    script, calls = directory / "recording-rsync", directory / "rsync-calls"
    script.write_text(f'#!/bin/sh\necho "$$ $*" >> "{calls}"\nexec "{shutil.which("rsync")}" "$@"\n')
    script.chmod(0o755)
    return script, calls


def corrupting_rsync(directory: Path, victim: Path) -> Path:
    """An rsync that, after each real transfer (not a dry run), damages ``victim``: a disk that lies."""
    script = directory / "corrupting-rsync"
    real = shutil.which("rsync")
    script.write_text(
        "#!/bin/sh\n"
        f'"{real}" "$@"; status=$?\n'
        'case " $* " in *" --dry-run "*) ;; *)'
        f' [ -f "{victim}" ] && printf X >> "{victim}";; esac\n'
        "exit $status\n"
    )
    script.chmod(0o755)
    return script
