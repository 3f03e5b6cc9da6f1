"""What the storage and transfer action tests share: real files with their records, a real ``rsync --daemon``
on a loopback port, and a tiny tmpfs to fill up."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from dataq.audit.manifest import OWN_DIR
from dataq.handshake import hello_line, is_hello
from dataq.record import Record

LOOPBACK = "127.0.0.1"
PUSHED_AT = 1404777600.0
"""2014-07-08 00:00 UTC, so ``{date}`` renders as 20140708."""
PUSHED_DATE = "20140708"
TINY_FS_BYTES = 64 * 1024


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def make_file(directory: Path, name: str, data: bytes, *, pushed_at: float | None = PUSHED_AT) -> Record:
    """Write ``data`` to ``directory/name`` and return its record (as the push daemon would store it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    return Record(path=str(path), checksum=md5(data), size=len(data), pushed_at=pushed_at, source="test")


def empty_root(tmp_path: Path) -> Path:
    """A storing root, made empty under ``tmp_path``."""
    path = tmp_path / "archive"
    path.mkdir()
    return path


def stored_copies(root: Path) -> list[Path]:
    """The copies a storing action keeps under ``root``: every file but those of dataq's own folder (manifests,
    quarantine)."""
    return sorted(path for path in root.rglob("*") if path.is_file() and OWN_DIR not in path.relative_to(root).parts)


def hidden_leftovers(directory: Path) -> list[Path]:
    """Temporary files an interrupted copy could have left anywhere below ``directory``."""
    return [path for path in directory.rglob(".*") if path.is_file()]


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


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def peer_server(handler: Handler) -> AsyncIterator[int]:
    """A TCP server on loopback whose connections ``handler`` serves; its port. On exit every connection still
    open is closed too (a hand-on keeps its link to a next site open until its action closes)."""
    writers: set[asyncio.StreamWriter] = set()

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            with contextlib.suppress(ConnectionError):
                await handler(reader, writer)
        finally:
            writers.discard(writer)
            writer.close()

    server = await asyncio.start_server(tracked, LOOPBACK, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in list(writers):
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        await server.wait_closed()


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


def counting_rsync(directory: Path) -> tuple[Path, Path]:
    """An rsync that notes how many files each transfer (not a dry run) was given: the program, and its notes."""
    script, counts = directory / "counting-rsync", directory / "files-per-send"
    script.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do case "$arg" in --files-from=*) listing="${arg#--files-from=}";; esac; done\n'
        f'case " $* " in *" --dry-run "*) ;; *) tr -cd "\\000" < "$listing" | wc -c >> "{counts}";; esac\n'
        f'exec "{shutil.which("rsync")}" "$@"\n')
    script.chmod(0o755)
    return script, counts


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


class OlderPeer:
    """A push daemon of a dataq older than the handshake (the 2014 data-q's lines, and JSON records of ``path``,
    ``checksum`` and ``size``): it reads every line as a record and refuses one with any other key, the hello
    included, in the words ``refusal`` gives (its parser's, by default; other words must change nothing)."""

    def __init__(self, refusal: Callable[[str], str] | None = None) -> None:
        self.lines: list[bytes] = []
        """Every line it was sent but hellos."""
        self.hellos = 0
        self.upgraded = False
        """Set by :meth:`upgrade`: it answers the handshake and takes every line, as a push daemon of today."""
        self.refusal = refusal or (lambda key: f"unknown JSON key {key!r}; expected only ['checksum', 'path', 'size']")
        self._writers: set[asyncio.StreamWriter] = set()

    def upgrade(self) -> None:
        """Become a push daemon of today, as an upgrade (a restart) would: its connections are closed."""
        self.upgraded = True
        for writer in self._writers:
            writer.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                if is_hello(line):
                    self.hellos += 1
                    writer.write(hello_line() if self.upgraded else f"Error: {self.refusal('hello')}\n".encode())
                    await writer.drain()
                    continue
                self.lines.append(line)
                if line.startswith(b"{"):
                    keys = sorted(json.loads(line))
                    unknown = [key for key in keys if key not in ("checksum", "path", "size")]
                    if unknown and not self.upgraded:
                        writer.write(f"Error: {self.refusal(unknown[0])}\n".encode())
                    else:
                        writer.write(b"Pushed ID=" + json.loads(line)["checksum"].encode() + b"\n")
                else:
                    writer.write(b"Pushed ID=" + line.split()[1] + b"\n")
                await writer.drain()
        self._writers.discard(writer)
        writer.close()
