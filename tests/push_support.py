"""Helpers of the push daemon and feeder tests: settings, daemons in-process and as subprocesses, raw clients,
test certificates. Fixtures are imported by name into the test modules that use them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dataq.config import PushSettings, QueueSettings, RedisSettings, Settings
from dataq.feed.client import Feeder, FeedResult
from dataq.protocol import ReplyKind
from dataq.push.daemon import run_push_daemon
from dataq.record import Record, format_line
from dataq.store import QueueList, QueueStore
from testbed.waits import eventually

QUEUE = "transfer"
LOOPBACK = "127.0.0.1"
STARTUP_TIMEOUT = 20.0
REPLY_TIMEOUT = 10.0
WAIT_TIMEOUT = 20.0
FAST_HEARTBEAT = {"heartbeat_interval": 0.1, "heartbeat_ttl": 1.0}
"""Heartbeats (and so the read-flag poll and the resume check) every 0.1 s."""


def push_settings(redis_url: str, data_dir: Path, *, max_queue_size: int = 1_000_000, **push: Any) -> Settings:
    """Settings for an in-process daemon on an ephemeral loopback port, heartbeating fast unless told."""
    push = {"port": 0, "host": LOOPBACK, **FAST_HEARTBEAT, **push}
    return Settings(
        data_dir=str(data_dir),
        redis=RedisSettings(url=redis_url, socket_timeout=1.0),
        push=PushSettings(**push),
        queues={QUEUE: QueueSettings(QUEUE, max_queue_size=max_queue_size)},
    )


@dataclass
class RunningPush:
    """A push daemon running as a task of the test's event loop."""

    host: str
    port: int
    stop: asyncio.Event
    task: asyncio.Task[int]

    async def shutdown(self) -> int:
        self.stop.set()
        return await asyncio.wait_for(self.task, WAIT_TIMEOUT)


async def start_push(settings: Settings) -> RunningPush:
    stop = asyncio.Event()
    bound: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_push_daemon(settings, QUEUE, stop=stop, ready=bound.set_result))
    done, _ = await asyncio.wait({task, bound}, timeout=STARTUP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
    if bound not in done:
        stop.set()
        if task in done:
            task.result()  # raises the daemon's start-up error
        raise AssertionError("the push daemon did not start in time")
    host, port = bound.result()
    return RunningPush(host, port, stop, task)


@contextlib.contextmanager
def threaded_push(settings: Settings) -> Iterator[int]:
    """A push daemon on its own event loop in a thread, for synchronous tests (hypothesis); yields its port."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    bound: list[int] = []
    started = threading.Event()

    def ready(address: tuple[str, int]) -> None:
        bound.append(address[1])
        started.set()

    async def main() -> int:
        try:
            return await run_push_daemon(settings, QUEUE, stop=stop, ready=ready)
        finally:
            started.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), name="push-daemon")
    thread.start()
    try:
        started.wait(STARTUP_TIMEOUT)
        if not bound:
            raise AssertionError("the push daemon did not start")
        yield bound[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(WAIT_TIMEOUT)
        loop.close()


StartPush = Callable[..., Awaitable[RunningPush]]
"""``start(redis_url=None, max_queue_size=..., **push settings) -> RunningPush``."""


@pytest.fixture
async def push_daemon(redis_url: str, tmp_path: Path) -> AsyncIterator[StartPush]:
    """A factory of in-process push daemons (on the test Redis unless told), all stopped at teardown."""
    running: list[RunningPush] = []

    async def start(*, url: str | None = None, **kw: Any) -> RunningPush:
        daemon = await start_push(push_settings(url or redis_url, tmp_path / "data", **kw))
        running.append(daemon)
        return daemon

    yield start
    for daemon in running:
        if not daemon.task.done():
            await daemon.shutdown()


# --- clients -------------------------------------------------------------------------------------------------


class LineClient:
    """A raw feeder connection: send bytes or lines, read reply lines."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, tls: ssl.SSLContext | None = None) -> LineClient:
        reader, writer = await asyncio.open_connection(LOOPBACK, port, ssl=tls, limit=1 << 20)
        return cls(reader, writer)

    async def send(self, *lines: str | bytes | Record) -> None:
        for item in lines:
            line = format_line(item) if isinstance(item, Record) else item
            self.writer.write((line.encode() if isinstance(line, str) else line) + b"\n")
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def reply(self, timeout: float = REPLY_TIMEOUT) -> str:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        if not line.endswith(b"\n"):
            raise ConnectionError(f"connection closed before a full reply (got {line!r})")
        return line.decode().rstrip("\n")

    async def replies(self, count: int, timeout: float = REPLY_TIMEOUT) -> list[str]:
        return [await self.reply(timeout) for _ in range(count)]

    async def closed_by_peer(self, timeout: float = REPLY_TIMEOUT) -> bool:
        """True once the daemon has closed the connection (reads to EOF)."""
        try:
            return await asyncio.wait_for(self.reader.read(), timeout) == b"" or self.reader.at_eof()
        except (ConnectionError, ssl.SSLError):
            return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await self.writer.wait_closed()


def original_feeder(port: int, line: str) -> str:
    """The 2014 test_feeder: a connection per record, the line sent, the reply read with one recv(1024)."""
    with socket.create_connection((LOOPBACK, port), timeout=REPLY_TIMEOUT) as sock:
        sock.sendall((line + "\n").encode())
        return sock.recv(1024).decode()


def reply_for(record: Record, kind: str = "Pushed") -> str:
    return f"{kind} ID={record.checksum}"


async def active_ids(store: QueueStore) -> list[str]:
    return [record.checksum for record in await store.list_records(QueueList.ACTIVE)]


async def feed_across(settings: Settings, records: Sequence[Record], disruption: Callable[[], Awaitable[object]],
                      timeout: float) -> FeedResult:
    """Feed ``records`` through a push daemon (window 100), run ``disruption`` once 2,000 are pushed, and return
    the feed's result once every record is answered (the feeder retrying for up to ``timeout`` s)."""
    daemon = await start_push(settings)
    feeder = Feeder(LOOPBACK, daemon.port, window=100, retry_for=timeout)
    try:
        feed = asyncio.create_task(feeder.feed(records))

        async def under_way() -> bool:
            return feeder.result.pushed >= 2_000

        await eventually(under_way)
        await disruption()
        return await asyncio.wait_for(feed, timeout)
    finally:
        await daemon.shutdown()


async def every_record_pushed_and_active(result: FeedResult, records: Sequence[Record], store: QueueStore) -> None:
    """Every record of a feed was answered ``Pushed``, none twice nor with an error, and each is in the active
    list: what a fail-over under a feed must leave."""
    assert (result.errors, result.ignored) == (0, 0)
    assert [reply.kind for reply in result.replies or []] == [ReplyKind.PUSHED] * len(records)
    tracked = {record.checksum for record in await store.list_records(QueueList.ACTIVE)}
    assert tracked == {record.checksum for record in records}


async def stays_unanswered(client: LineClient, seconds: float) -> bool:
    """True if no reply arrives within ``seconds``."""
    try:
        await asyncio.wait_for(client.reader.readline(), seconds)
    except TimeoutError:
        return True
    return False


# --- TLS -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    rogue_cert: str
    """A client certificate signed by another CA."""
    rogue_key: str


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1, a client certificate, and a client certificate of another CA."""
    d = directory
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue-ca"):
        _openssl("req", "-x509", *ec, "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"), "-days", "2",
                 "-subj", f"/CN=dataq test {ca}")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, ca, ext in (("server", "ca", "server.ext"), ("client", "ca", "client.ext"),
                          ("rogue", "rogue-ca", "client.ext")):
        _openssl("req", *ec, "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
                 "-subj", f"/CN=dataq test {name}")
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.pem"), "-CAkey",
                 str(d / f"{ca}.key"), "-CAcreateserial", "-out", str(d / f"{name}.pem"), "-days", "2",
                 "-extfile", str(d / ext))
    return Certs(*(str(d / name) for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key",
                                               "rogue.pem", "rogue.key")))


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


# --- subprocess daemons ---------------------------------------------------------------------------------------


def dataq_command() -> list[str]:
    """The installed ``dataq`` console script of this interpreter's environment."""
    script = shutil.which("dataq", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-c", "from dataq.cli.main import main; main()"]


def write_push_config(tmp_path: Path, redis_url: str, port: int, **push: Any) -> Path:
    def value(v: Any) -> str:
        return f'"{v}"' if isinstance(v, str) else repr(v)

    lines = [
        f'data_dir = "{tmp_path / "data"}"',
        "[redis]", f'url = "{redis_url}"', "socket_timeout = 1.0",
        "[log]", f'dir = "{tmp_path / "log"}"', 'format = "json"',
        "[push]", f"port = {port}", 'host = "127.0.0.1"', *(f"{k} = {value(v)}" for k, v in push.items()),
        "[pop]", "heartbeat_interval = 0.1", "heartbeat_ttl = 1.0",
        f"[queues.{QUEUE}]",
    ]
    path = tmp_path / "dataq.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float = STARTUP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"dataq push exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.2):
            return
        time.sleep(0.05)
    raise AssertionError("dataq push did not listen in time")


@dataclass
class PushProcess:
    """``dataq push`` as a subprocess."""

    process: subprocess.Popen[bytes]
    port: int
    log_dir: Path
    extra: list[str] = field(default_factory=list)

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = WAIT_TIMEOUT) -> int:
        return self.process.wait(timeout)

    def log_lines(self) -> list[str]:
        path = self.log_dir / "push.log"
        return path.read_text().splitlines() if path.exists() else []


@contextlib.contextmanager
def push_process(config: Path, port: int, *args: str) -> Iterator[PushProcess]:
    """``dataq push --config CONFIG`` listening on ``port``; its stderr goes to ``push.stderr`` beside CONFIG."""
    with open(config.parent / "push.stderr", "ab") as stderr:
        process = subprocess.Popen([*dataq_command(), "push", "--config", str(config), *args],
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_listening(port, process)
        yield PushProcess(process, port, config.parent / "log")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(WAIT_TIMEOUT)



@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Child processes a test starts (``dataq run``, daemons): any still running at the end is killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
            child.wait()
