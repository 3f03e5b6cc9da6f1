"""What an rsync call's end says of its destination: an outage to wait out, or a fault to report."""

from __future__ import annotations

from dataq.actions.rsync import Completed
from dataq.errors import Retryable

GREETING_UNSEEN = ("rsync: did not see server greeting\n"
                   "rsync error: error starting client-server protocol (code 5) at main.c(1954) [sender=3.5.0]\n")
UNKNOWN_MODULE = ("@ERROR: Unknown module 'incomming'\n"
                  "rsync error: error starting client-server protocol (code 5) at main.c(1850) [sender=3.5.0]\n")


def test_a_connection_closed_before_any_daemon_spoke_is_an_outage() -> None:
    # A relay, a load balancer or a tunnel with no rsync daemon behind it accepts the connection and closes it.
    done = Completed(5, "", GREETING_UNSEEN)
    assert done.unreachable
    assert isinstance(done.failure("rsync of a.fits", "rsync://archive/incoming"), Retryable)


def test_a_daemon_that_refuses_the_call_is_a_fault_to_mend() -> None:
    done = Completed(5, "", UNKNOWN_MODULE)
    assert not done.unreachable
    failure = done.failure("rsync of a.fits", "rsync://archive/incomming")
    assert not isinstance(failure, Retryable) and "Unknown module 'incomming'" in str(failure)


def test_another_server_on_the_port_is_a_fault_to_mend() -> None:
    # rsync://host:22/module: ssh answers, not an rsync daemon.
    done = Completed(5, "", 'rsync: server sent "SSH-2.0-OpenSSH_9.2p1 Debian-2" rather than greeting\n'
                            "rsync error: error starting client-server protocol (code 5) at main.c(1965)\n")
    assert not done.unreachable


def test_a_daemon_at_its_connection_cap_is_an_outage_as_before() -> None:
    assert Completed(5, "", "@ERROR: max connections (4) reached -- try again later\n").unreachable
