"""sd_notify: datagrams received on a real unix socket, as systemd would receive them."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataq import sdnotify

RECEIVE_TIMEOUT = 2.0


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket standing in for systemd's, named by $NOTIFY_SOCKET."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(RECEIVE_TIMEOUT)
        monkeypatch.setenv(sdnotify.NOTIFY_SOCKET_ENV, str(path))
        yield sock


def received(sock: socket.socket) -> str:
    return sock.recv(4096).decode()


def test_ready_watchdog_status_and_stopping_arrive_as_datagrams(notify_socket: socket.socket) -> None:
    assert sdnotify.ready()
    assert received(notify_socket) == "READY=1"
    assert sdnotify.watchdog()
    assert received(notify_socket) == "WATCHDOG=1"
    assert sdnotify.status("serving queue transfer\non port 9988")
    assert received(notify_socket) == "STATUS=serving queue transfer on port 9988"  # one line: a newline ends it
    assert sdnotify.stopping("draining")
    assert received(notify_socket) == "STOPPING=1\nSTATUS=draining"


def test_ready_can_carry_a_status_line(notify_socket: socket.socket) -> None:
    assert sdnotify.ready("listening on 127.0.0.1:9988")
    assert received(notify_socket) == "READY=1\nSTATUS=listening on 127.0.0.1:9988"


def test_an_abstract_socket_name_starting_with_at_is_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"dataq-test-{os.getpid()}-{secrets.token_hex(4)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(RECEIVE_TIMEOUT)
        monkeypatch.setenv(sdnotify.NOTIFY_SOCKET_ENV, "@" + name)
        assert sdnotify.ready()
        assert received(sock) == "READY=1"


def test_without_notify_socket_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sdnotify.NOTIFY_SOCKET_ENV, raising=False)
    assert not sdnotify.ready()
    assert not sdnotify.watchdog()
    assert not sdnotify.notify("READY=1", environ={sdnotify.NOTIFY_SOCKET_ENV: ""})


def test_a_socket_nobody_listens_on_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sdnotify.NOTIFY_SOCKET_ENV, str(tmp_path / "gone"))
    assert sdnotify.ready() is False


def test_a_full_socket_queue_delays_the_message_rather_than_losing_it(notify_socket: socket.socket) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as filler:
        filler.connect(notify_socket.getsockname())
        filler.setblocking(False)
        with pytest.raises(BlockingIOError):
            while True:  # until the receiver's queue is full (net.unix.max_dgram_qlen)
                filler.send(b"FILLER=1")
    sent: list[bool] = []
    sender = threading.Thread(target=lambda: sent.append(sdnotify.ready()))
    sender.start()
    time.sleep(0.2)  # the sender is now waiting for room
    messages = []
    while not messages or messages[-1] == "FILLER=1":
        messages.append(received(notify_socket))
    sender.join(RECEIVE_TIMEOUT)
    assert sent == [True]
    assert messages[-1] == "READY=1"


def test_an_unsupported_address_is_ignored() -> None:
    assert not sdnotify.notify("READY=1", environ={sdnotify.NOTIFY_SOCKET_ENV: "vsock:2:1234"})


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),  # inherited: meant for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec_for_this_process(
    environ: dict[str, str], expected: float | None
) -> None:
    assert sdnotify.watchdog_interval(environ) == expected


async def test_run_watchdog_pings_until_stopped(notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sdnotify.WATCHDOG_USEC_ENV, "40000")  # a ping every 20 ms
    monkeypatch.delenv(sdnotify.WATCHDOG_PID_ENV, raising=False)
    notify_socket.setblocking(False)
    stop = asyncio.Event()
    task = asyncio.create_task(sdnotify.run_watchdog(stop))
    loop = asyncio.get_running_loop()
    pings = [(await asyncio.wait_for(loop.sock_recv(notify_socket, 64), RECEIVE_TIMEOUT)).decode() for _ in range(3)]
    stop.set()
    await asyncio.wait_for(task, RECEIVE_TIMEOUT)
    assert pings == ["WATCHDOG=1"] * 3


async def test_run_watchdog_withholds_pings_while_the_daemon_says_it_is_stalled(
    notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sdnotify.WATCHDOG_USEC_ENV, "20000")
    notify_socket.setblocking(False)
    stop = asyncio.Event()
    alive = False
    task = asyncio.create_task(sdnotify.run_watchdog(stop, alive=lambda: alive))
    await asyncio.sleep(0.1)  # several intervals
    with pytest.raises(BlockingIOError):
        notify_socket.recv(64)
    alive = True
    ping = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(notify_socket, 64), RECEIVE_TIMEOUT)
    stop.set()
    await asyncio.wait_for(task, RECEIVE_TIMEOUT)
    assert ping == b"WATCHDOG=1"


async def test_run_watchdog_returns_at_once_without_a_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sdnotify.WATCHDOG_USEC_ENV, raising=False)
    await asyncio.wait_for(sdnotify.run_watchdog(asyncio.Event()), RECEIVE_TIMEOUT)
