"""The redis-server that dataq starts, owns and stops: the "embedded" Redis.

Everything the server needs is on its command line; its data directory holds:

====================  ============================================================================
``appendonlydir/``    the append-only file, the only durable copy of the queues (no RDB snapshots)
``redis.log``         the server's log, and its stdout/stderr (start-up errors land there too)
``redis.pid``         written by redis-server itself
``redis.sock``        the unix socket, when the server listens on one instead of TCP
``dataq-redis.lock``  an exclusive ``flock`` saying "this directory is in use"; ``pid=``, ``owner=``
                      and ``url=`` lines tell others who holds it and where the server answers
====================  ============================================================================

The lock is taken by the owning process and inherited by redis-server, so the directory stays claimed for
exactly as long as the server process lives, even when its owner dies without stopping it: two servers
appending to one AOF would corrupt it.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from dataq.config import APPENDFSYNC_CHOICES, DEFAULT_APPENDFSYNC, MAX_PORT
from dataq.errors import EmbeddedRedisError
from dataq.runtime import children
from dataq.runtime.locks import held_lock_text, try_lock, write_holder
from dataq.store.connection import server_pid

REDIS_SERVER = "redis-server"
INSTALL_HINT = "install it with `apt-get install redis-server` (Debian/Ubuntu) or set [redis] url to an existing server"
LOOPBACK = "127.0.0.1"
DEFAULT_START_TIMEOUT = 10.0
DEFAULT_STOP_TIMEOUT = 10.0

LOCK_FILE = "dataq-redis.lock"
SOCKET_FILE = "redis.sock"
LOG_FILE = "redis.log"
PID_FILE = "redis.pid"
DATA_DIR_MODE = 0o700
LOCK_FILE_MODE = 0o600
UNIX_SOCKET_PERM = "700"
# sun_path holds 108 bytes on Linux, the last of which is the terminating NUL.
MAX_UNIX_SOCKET_PATH = 107

# Another process can take the port between free_port() closing it and redis-server binding it.
PORT_ATTEMPTS = 5
PORT_IN_USE_MARKER = "Address already in use"
PROBE_TIMEOUT = 0.5
PROBE_INTERVAL = 0.05
LOG_TAIL_LINES = 20

_logger = logging.getLogger(__name__)


class EmbeddedRedis:
    """A redis-server child process with its own private data directory.

    ``port=None`` listens only on the unix socket ``<data_dir>/redis.sock``; ``port=0`` picks a free loopback
    TCP port at the first start and keeps it for restarts; ``port=N`` listens on ``127.0.0.1:N``. With
    ``die_with_parent``, the server stops (SIGTERM) when the thread that started it dies
    (:mod:`dataq.runtime.children`): ``dataq run`` must leave no server behind even when it is SIGKILLed.
    """

    def __init__(
        self,
        data_dir: str | Path,
        *,
        port: int | None = None,
        appendfsync: str = DEFAULT_APPENDFSYNC,
        executable: str | None = None,
        extra_args: Sequence[str] = (),
        die_with_parent: bool = False,
    ) -> None:
        if appendfsync not in APPENDFSYNC_CHOICES:
            raise EmbeddedRedisError(f"appendfsync must be one of {', '.join(APPENDFSYNC_CHOICES)}, "
                                     f"not {appendfsync!r}")
        if port is not None and not 0 <= port <= MAX_PORT:
            raise EmbeddedRedisError(f"port must be between 0 and {MAX_PORT}, not {port}")
        self._data_dir = _absolute(data_dir)
        self._socket_path = self._data_dir / SOCKET_FILE if port is None else None
        if self._socket_path is not None and len(os.fsencode(self._socket_path)) > MAX_UNIX_SOCKET_PATH:
            raise EmbeddedRedisError(
                f"unix socket path {self._socket_path} is {len(os.fsencode(self._socket_path))} bytes, longer"
                f" than the {MAX_UNIX_SOCKET_PATH} bytes Linux allows; use a shorter data directory or a TCP port"
            )
        self._requested_port = port
        # The TCP port actually used; for port=0 it is chosen by the first successful start.
        self._port: int | None = port or None
        self._appendfsync = appendfsync
        self._executable = executable
        self._extra_args = tuple(extra_args)
        self._die_with_parent = die_with_parent
        self._process: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None
        self._stopping = threading.Lock()

    @property
    def data_dir(self) -> Path:
        """The absolute data directory."""
        return self._data_dir

    @property
    def url(self) -> str:
        """``unix:///abs/path/redis.sock`` or ``redis://127.0.0.1:PORT``."""
        if self._socket_path is not None:
            return f"unix://{quote(str(self._socket_path))}"
        if self._port is None:
            raise EmbeddedRedisError("the port of an embedded redis-server with port=0 is known only after start()")
        return f"redis://{LOOPBACK}:{self._port}"

    @property
    def pid(self) -> int | None:
        """The redis-server process id while it runs."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def is_running(self) -> bool:
        """Whether the redis-server child is alive (not whether it answers)."""
        return self.pid is not None

    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Start redis-server and return once it answers PING (AOF loaded); a no-op while it runs."""
        if self.is_running():
            return
        executable = self._resolve_executable()
        try:
            self._data_dir.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        except OSError as exc:
            raise EmbeddedRedisError(f"cannot create the redis data directory {self._data_dir}: {exc}") from exc
        self._acquire_lock()
        try:
            self._launch(executable, timeout)
        except BaseException:
            self._release_lock()
            raise
        assert self._process is not None
        self._write_lock_info(self._process.pid)

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """SIGTERM (redis fsyncs the AOF and exits), SIGKILL after ``timeout``; then release the directory.

        Safe to call from two threads at once (``dataq run``'s forced exit may meet its orderly one): the second
        waits up to ``timeout`` for the first and otherwise leaves it to finish."""
        if not self._stopping.acquire(timeout=timeout):
            return
        try:
            process, self._process = self._process, None
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    _logger.warning("redis-server pid %d ignored SIGTERM for %.1fs; killing it", process.pid, timeout)
                    _kill(process)
            self._release_lock()
        finally:
            self._stopping.release()

    def kill(self) -> None:
        """SIGKILL the server as a crash would; ``start()`` afterwards replays the AOF."""
        with self._stopping:
            process, self._process = self._process, None
            if process is not None and process.poll() is None:
                _kill(process)
            self._release_lock()

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _resolve_executable(self) -> str:
        found = shutil.which(self._executable or REDIS_SERVER)
        if found is not None:
            return found
        if self._executable is None:
            raise EmbeddedRedisError(f"{REDIS_SERVER} not found on PATH; {INSTALL_HINT}")
        raise EmbeddedRedisError(f"redis-server executable {self._executable!r} not found; {INSTALL_HINT}")

    def _launch(self, executable: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        choose_port = self._socket_path is None and self._port is None
        log_path = self._data_dir / LOG_FILE
        for attempt in range(1, PORT_ATTEMPTS + 1):
            port = free_port() if choose_port else (self._port or 0)
            log_offset = _file_size(log_path)
            process = self._spawn(executable, port)
            url = self.url if self._socket_path is not None else f"redis://{LOOPBACK}:{port}"
            try:
                ready = _await_ready(process, url, deadline)
            except BaseException:
                _kill(process)
                raise
            if ready:
                self._process = process
                self._port = port or None
                return
            if process.poll() is None:
                _kill(process)
                raise EmbeddedRedisError(
                    f"redis-server did not answer PING within {timeout:g}s; {_log_tail(log_path, log_offset)}"
                )
            output = _read_from(log_path, log_offset)
            if choose_port and PORT_IN_USE_MARKER in output and attempt < PORT_ATTEMPTS:
                continue
            raise EmbeddedRedisError(
                f"redis-server exited with code {process.returncode} during start-up; {_log_tail(log_path, log_offset)}"
            )
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _spawn(self, executable: str, port: int) -> subprocess.Popen[bytes]:
        d = self._data_dir
        args = [
            executable,
            "--daemonize", "no",
            "--dir", str(d),
            "--appendonly", "yes",
            "--appendfsync", self._appendfsync,
            "--save", "",
            "--bind", LOOPBACK,
            "--protected-mode", "yes",
            "--port", str(port),
            "--pidfile", str(d / PID_FILE),
            "--logfile", str(d / LOG_FILE),
        ]  # fmt: skip
        if self._socket_path is not None:
            args += ["--unixsocket", str(self._socket_path), "--unixsocketperm", UNIX_SOCKET_PERM]
        args += self._extra_args
        assert self._lock_fd is not None
        try:
            # Errors printed before redis opens its logfile (bad arguments) land in the same file.
            with open(d / LOG_FILE, "ab") as log:
                return subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    # Inheriting the lock keeps the directory claimed while this server lives (module docstring).
                    pass_fds=(self._lock_fd,),
                    # Its own session: a Ctrl-C meant for the daemon must not stop Redis under the daemon's
                    # graceful shutdown; the owner stops it last.
                    start_new_session=True,
                    preexec_fn=children.die_with_parent() if self._die_with_parent else None,  # noqa: PLW1509
                )
        except OSError as exc:
            raise EmbeddedRedisError(f"cannot run {executable}: {exc}") from exc

    def _acquire_lock(self) -> None:
        if self._lock_fd is not None:
            return  # still ours: the server died on its own and is being started again
        lock_path = self._data_dir / LOCK_FILE
        try:
            taken = try_lock(lock_path, LOCK_FILE_MODE)
        except OSError as exc:
            raise EmbeddedRedisError(f"cannot lock {lock_path}: {exc}") from exc
        if isinstance(taken, str):
            holder = _parse_lock_info(taken).get("pid", "unknown")
            raise EmbeddedRedisError(
                f"data directory {self._data_dir} is already used by a running dataq redis-server (pid {holder})")
        self._lock_fd = taken
        self._write_lock_info(os.getpid())

    def _write_lock_info(self, pid: int) -> None:
        assert self._lock_fd is not None
        lines = [f"pid={pid}", f"owner={os.getpid()}"]
        if self._socket_path is not None or self._port is not None:
            lines.append(f"url={self.url}")
        write_holder(self._lock_fd, "\n".join(lines) + "\n")

    def _release_lock(self) -> None:
        # The file itself stays: unlinking a lock file races with a process that has just opened it.
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def find_running(data_dir: str | Path) -> str | None:
    """The URL of the embedded redis-server that holds ``data_dir``, or None.

    A server counts only if the directory's lock is held and the server at the recorded URL answers PING with
    the recorded pid. A server owned by this very process counts too.
    """
    text = held_lock_text(_absolute(data_dir) / LOCK_FILE)
    if text is None:
        return None
    info = _parse_lock_info(text)
    url, pid = info.get("url"), info.get("pid", "")
    if url is None or not pid.isdigit():
        return None
    return url if server_pid(url, PROBE_TIMEOUT) == int(pid) else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(os.path.expanduser(path)))


def _await_ready(process: subprocess.Popen[bytes], url: str, deadline: float) -> bool:
    """True once ``process`` answers PING at ``url``; False if it exited or the deadline passed."""
    while process.poll() is None:
        # The deadline is checked before the probe so that a timeout of 0 fails deterministically rather than
        # racing a server that happens to come up within the first probe.
        if time.monotonic() >= deadline:
            return False
        # Compare pids: another server may answer on a port this one failed to bind.
        if server_pid(url, PROBE_TIMEOUT) == process.pid:
            return True
        time.sleep(PROBE_INTERVAL)
    return False


def _kill(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


def _parse_lock_info(text: str) -> dict[str, str]:
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def _log_tail(path: Path, offset: int) -> str:
    lines = _read_from(path, offset).strip().splitlines()[-LOG_TAIL_LINES:]
    if not lines:
        return f"{path} says nothing"
    return f"the end of {path}:\n" + "\n".join(lines)
