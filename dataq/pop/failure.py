"""What an action's failure means for its record: counted toward ``max_errors`` (permanent), or an outage of a
destination that must not burn the record's retries (transient).

An action says so by raising :class:`~dataq.errors.Retryable` or :class:`~dataq.errors.Permanent`. Where it
raises anything else, the default is by type: the network's own errors (a refused or reset connection, a
timed-out socket, a name that does not resolve for now) are transient; every other error, and an action running
past its time limit, counts. A time limit is not taken for an outage: a file too large for the limit would fail
the same way every time, and waiting for the destination would hold the queue for ever.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from dataq.errors import ActionError, Retryable

TRANSIENT_ERRNOS = frozenset({
    errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EHOSTUNREACH, errno.ENETUNREACH,
    errno.EHOSTDOWN, errno.ENETDOWN, errno.ETIMEDOUT, errno.EPIPE,
})
"""OSError numbers that mean the other end cannot be reached now."""
TRANSIENT_RESOLVER_ERRORS = frozenset({socket.EAI_AGAIN})
"""getaddrinfo errors that mean "try again": the resolver, not the name, failed."""


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a record's actions did not all succeed."""

    message: str
    """``<action>: <what failed>``: the record's last error."""
    transient: bool = False
    """True: the destination was unreachable; the record waits instead of counting a failure."""
    destination: str | None = None
    """For a transient failure: what is unreachable (its circuit breaker's key)."""


def is_transient(exc: BaseException) -> bool:
    """Whether an exception an action let out means an outage rather than a fault of the record."""
    if isinstance(exc, Retryable):
        return True
    if isinstance(exc, ActionError):
        return False
    if isinstance(exc, socket.gaierror):
        return exc.errno in TRANSIENT_RESOLVER_ERRORS
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    return isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS
