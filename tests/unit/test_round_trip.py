"""Where ``network_move`` greets the rsync daemon of its destination: the host and port of an ``rsync://`` URL
(:func:`dataq.actions.rsync.daemon_address`)."""

from __future__ import annotations

import pytest

from dataq.actions.rsync import DaemonAddress, daemon_address


@pytest.mark.parametrize(("destination", "address"), [
    ("rsync://archive.example.org/data/incoming", DaemonAddress("archive.example.org", 873)),
    ("rsync://dq@10.0.0.7:8873/data", DaemonAddress("10.0.0.7", 8873)),
    ("rsync://[2001:db8::7]:8873/data/", DaemonAddress("2001:db8::7", 8873)),
    ("rsync://[::1]/data", DaemonAddress("::1", 873)),
])
def test_an_rsync_url_names_the_daemon_to_greet(destination: str, address: DaemonAddress) -> None:
    assert daemon_address(destination) == address


@pytest.mark.parametrize("destination", ["/data/incoming", "archive:/data/incoming", "dq@archive:data"])
def test_other_destinations_have_no_daemon_to_greet(destination: str) -> None:
    assert daemon_address(destination) is None
