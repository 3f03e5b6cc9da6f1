"""sd_notify: datagrams received on a real unix socket, as systemd would receive them; never blocking the loop."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataq.runtime import systemd

RECEIVE_TIMEOUT = 2.0


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket standing in for systemd's, named by $NOTIFY_SOCKET."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(RECEIVE_TIMEOUT)
        monkeypatch.setenv(systemd.NOTIFY_SOCKET_ENV, str(path))
        yield sock


def received(sock: socket.socket) -> str:
    return sock.recv(4096).decode()


async def test_ready_watchdog_and_stopping_arrive_as_datagrams(notify_socket: socket.socket) -> None:
    assert await systemd.ready()
    assert received(notify_socket) == "READY=1"
    assert await systemd.watchdog()
    assert received(notify_socket) == "WATCHDOG=1"
    assert await systemd.stopping("draining\nthe last records")
    assert received(notify_socket) == "STOPPING=1\nSTATUS=draining the last records"  # a newline would end it


async def test_ready_can_carry_a_status_line(notify_socket: socket.socket) -> None:
    assert await systemd.ready("listening on 127.0.0.1:9988")
    assert received(notify_socket) == "READY=1\nSTATUS=listening on 127.0.0.1:9988"


async def test_an_abstract_socket_name_starting_with_at_is_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"dataq-test-{os.getpid()}-{secrets.token_hex(4)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(RECEIVE_TIMEOUT)
        monkeypatch.setenv(systemd.NOTIFY_SOCKET_ENV, "@" + name)
        assert await systemd.ready()
        assert received(sock) == "READY=1"


async def test_without_notify_socket_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(systemd.NOTIFY_SOCKET_ENV, raising=False)
    assert not await systemd.ready()
    assert not await systemd.watchdog()
    assert not await systemd.notify("READY=1", environ={systemd.NOTIFY_SOCKET_ENV: ""})


async def test_a_socket_nobody_listens_on_is_reported_not_raised(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(systemd.NOTIFY_SOCKET_ENV, str(tmp_path / "gone"))
    assert await systemd.ready() is False


def fill(notify_socket: socket.socket) -> socket.socket:
    """A sender that has filled the receiver's queue (net.unix.max_dgram_qlen datagrams)."""
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    filler.connect(notify_socket.getsockname())
    filler.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            filler.send(b"FILLER=1")
    return filler


async def test_a_full_socket_queue_delays_the_message_without_blocking_the_loop(notify_socket: socket.socket) -> None:
    with fill(notify_socket):
        sending = asyncio.create_task(systemd.ready())
        ticks = 0
        while ticks < 20:  # the loop keeps turning while the message waits for room
            await asyncio.sleep(0)
            ticks += 1
        assert not sending.done()
        messages = []
        while not messages or messages[-1] == "FILLER=1":
            messages.append(await asyncio.to_thread(received, notify_socket))
        assert await asyncio.wait_for(sending, RECEIVE_TIMEOUT) is True
    assert messages[-1] == "READY=1"


async def test_a_queue_that_stays_full_gives_up_after_the_send_timeout(notify_socket: socket.socket,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(systemd, "SEND_TIMEOUT", 0.05)
    with fill(notify_socket):
        assert await systemd.ready() is False


async def test_an_unsupported_address_is_ignored() -> None:
    assert not await systemd.notify("READY=1", environ={systemd.NOTIFY_SOCKET_ENV: "vsock:2:1234"})


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
    assert systemd.watchdog_interval(environ) == expected


async def test_run_watchdog_pings_until_stopped(notify_socket: socket.socket) -> None:
    notify_socket.setblocking(False)
    stop = asyncio.Event()
    task = asyncio.create_task(systemd.run_watchdog(0.02, stop))
    loop = asyncio.get_running_loop()
    pings = [(await asyncio.wait_for(loop.sock_recv(notify_socket, 64), RECEIVE_TIMEOUT)).decode() for _ in range(3)]
    stop.set()
    await asyncio.wait_for(task, RECEIVE_TIMEOUT)
    assert pings == ["WATCHDOG=1"] * 3


async def test_run_watchdog_withholds_pings_while_a_check_says_its_loop_stalled(notify_socket: socket.socket) -> None:
    notify_socket.setblocking(False)
    stop = asyncio.Event()
    alive = False
    asked = asyncio.Event()

    def check() -> bool:
        asked.set()
        return alive

    task = asyncio.create_task(systemd.run_watchdog(0.01, stop, [lambda: True, check]))
    for _ in range(3):  # three turns of the watchdog, each asking and withholding
        asked.clear()
        await asyncio.wait_for(asked.wait(), RECEIVE_TIMEOUT)
    with pytest.raises(BlockingIOError):
        notify_socket.recv(64)
    alive = True
    ping = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(notify_socket, 64), RECEIVE_TIMEOUT)
    stop.set()
    await asyncio.wait_for(task, RECEIVE_TIMEOUT)
    assert ping == b"WATCHDOG=1"
