"""The one error hierarchy of dataq.

Every error dataq raises on purpose derives from :class:`DataqError`, so a caller (the CLI, a daemon's main
loop) can tell "dataq refused this, with a message for a person" from a bug. Errors of the libraries we use
(redis-py, tomllib, OSError of subprocesses) are translated at the boundary where they happen.
"""

from __future__ import annotations


class DataqError(Exception):
    """Base class: something dataq refused or could not do, with a message meant for an operator."""


class ConfigError(DataqError):
    """The configuration file or an environment override is invalid (names the file, key and expectation)."""


class InvalidRecord(DataqError):
    """A record line or record field is malformed; the message names the field and what is wrong."""


class StoreError(DataqError):
    """The queue store refused an operation."""


class StoreUnavailable(StoreError):
    """Redis cannot be reached (connection refused, lost, timed out, loading); retry with backoff."""


class RangeError(StoreError):
    """A range of ids (first-id .. last-id) cannot be applied: unknown id, wrong list or reversed."""


class LeaseLost(StoreError):
    """A lease (a single-writer lock in Redis) could not be taken in time, or was lost while held."""


class EmbeddedRedisError(DataqError):
    """The embedded redis-server could not be started, is missing, or its data directory is in use."""


class ActionError(DataqError):
    """An action failed on a record; the message says what failed. The record is retried or deactivated."""


class ActionTimeout(ActionError):
    """An action did not finish within its timeout."""


class Retryable(ActionError):
    """A transient failure: the destination cannot be reached now (connection refused, timed out, a temporary
    refusal). It does not count toward ``max_errors``: the record goes back to the next-to-run end of the active
    list, and after a few in a row the destination is marked unreachable and probed with back-off.

    ``destination`` names what is unreachable (the key of its circuit breaker); None: the action's own
    :meth:`~dataq.actions.Action.destination` for the record, or else the action's name.
    """

    def __init__(self, message: str = "", *, destination: str | None = None) -> None:
        super().__init__(message)
        self.destination = destination


class Permanent(ActionError):
    """A failure that trying again soon will not cure (checksum or size mismatch, missing source, refused path).
    It counts toward ``max_errors``, like any :class:`ActionError` that is not :class:`Retryable`."""


class ProtocolError(DataqError):
    """A peer broke the line protocol (over-long line, connection closed mid-reply, unexpected reply)."""


NOT_REPLICATED_PREFIX = "not replicated to "
"""How the message of :class:`NotReplicated` starts (a feeder answered with it sends the record again)."""


class NotReplicated(StoreUnavailable):
    """Redis took a write, but fewer replicas than ``min_replicas`` confirmed it in time: a fail-over could lose
    it, so it is not acknowledged (the writer retries; a retried write is recognised)."""

    def __init__(self, wanted: int, timeout: float, confirmed: int) -> None:
        super().__init__(f"{NOT_REPLICATED_PREFIX}{wanted} replica(s) within {timeout:g} s")
        self.wanted, self.timeout, self.confirmed = wanted, timeout, confirmed


class SpoolError(DataqError):
    """A feeder's spool (:mod:`dataq.feed.spool`) cannot be used; the message names its file."""


class SpoolFull(SpoolError):
    """The spool's disk is full: intake stops until there is room again (sending goes on and frees some)."""


class SpoolCorrupt(SpoolError):
    """The spool's database is damaged or is not a spool at all."""


class SpoolBusy(SpoolError):
    """Another feeder already uses this spool directory (two senders of one spool would send twice)."""
