"""The rsync daemon tests send to (:mod:`testbed.rsync`): a destination that goes down comes back on its own port,
and one that cannot bind it says so instead of passing off another daemon's socket as its own."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from testbed.ports import ephemeral_low, share, unclaimed_port
from testbed.rsync import LOOPBACK, RsyncDaemon


def test_a_daemon_listens_below_the_ephemeral_range_and_comes_back_on_its_port(tmp_path: Path) -> None:
    daemon = RsyncDaemon(tmp_path / "rsyncd", {"incoming": tmp_path / "incoming"})
    daemon.start()
    try:
        port = daemon.port
        assert port < ephemeral_low(), "the kernel never gives this port to a connection while the daemon is down"
        daemon.stop()
        daemon.start(port)
        assert daemon.port == port
        with socket.create_connection((LOOPBACK, port), timeout=5) as connection:
            assert connection.recv(64).startswith(b"@RSYNCD:")
    finally:
        daemon.stop()


def test_a_daemon_whose_port_another_process_listens_on_fails_to_start(tmp_path: Path) -> None:
    daemon = RsyncDaemon(tmp_path / "rsyncd", {"incoming": tmp_path / "incoming"})
    daemon.start()
    port = daemon.port
    daemon.stop()
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind((LOOPBACK, port))
        other.listen()  # answers a connect, as another test's daemon would
        with pytest.raises(RuntimeError, match="did not start"):
            daemon.start(port)


def test_each_xdist_worker_picks_ports_from_a_slice_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    slices = []
    for worker in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
        low, high = share()
        assert low <= unclaimed_port() <= high
        slices.append(range(low, high + 1))
    assert all(not set(a) & set(b) for n, a in enumerate(slices) for b in slices[n + 1:]), "no two workers share"
    assert max(slice_.stop for slice_ in slices) <= ephemeral_low()
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert share()[1] == ephemeral_low() - 1, "outside xdist: the whole range"
