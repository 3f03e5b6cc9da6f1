"""Detectors that turn a stream of small events into one notice: systemic failures, and Redis staying down.

Each has a pure method that takes the time and returns the notice to send, if any (easy to reason about and to
test), and a method a daemon calls that also posts the notice to its notifier.
"""

from __future__ import annotations

import collections
import time

from dataq.config import MailSettings
from dataq.logs import get_logger
from dataq.ops.notices import Notice, Notifier, one_line, redis_back_notice, redis_down_notice, systemic_notice

DISTINCT_ERRORS_MAX = 20
"""Distinct error messages counted in one systemic notice; the rest are counted together as "other"."""
OTHER_ERRORS = "(other errors)"
ERROR_KEY_MAX = 200
"""Characters of an error message used to tell errors apart (paths and ids in the tail vary)."""

log = get_logger()


class FailureWatch:
    """More than ``threshold`` action failures within ``window`` seconds on a queue is a systemic failure.

    Failures are counted in one-second buckets, so memory stays at most ``window`` buckets whatever the rate.
    While the failure rate stays above the threshold, one notice goes out per ``window``, each with the failures
    in the window and the errors seen since the previous notice; the mail notifier's interval folds them further.
    """

    def __init__(self, notifier: Notifier, queue: str, threshold: int, window: float, examples: int = 5) -> None:
        self.notifier, self.queue = notifier, queue
        self.threshold, self.window, self.examples = threshold, window, examples
        self._buckets: collections.deque[list[int]] = collections.deque()  # [second, failures in it]
        self._in_window = 0
        self._last_fired: float | None = None
        self._errors: dict[str, int] = {}
        self._samples: list[dict[str, str]] = []

    @classmethod
    def from_settings(cls, notifier: Notifier, queue: str, mail: MailSettings) -> FailureWatch:
        return cls(notifier, queue, mail.systemic_failures, mail.systemic_window, mail.examples)

    def record(self, record_id: str, error: str, now: float | None = None) -> Notice | None:
        """Count one failure at ``now`` (monotonic seconds); the systemic notice to send, if this one tips it."""
        now = time.monotonic() if now is None else now
        self._expire(now)
        if self._in_window == 0:  # a new incident: forget the error statistics of the previous one
            self._errors.clear()
            self._samples.clear()
        second = int(now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += 1
        else:
            self._buckets.append([second, 1])
        self._in_window += 1
        key = one_line(error, ERROR_KEY_MAX)
        if key in self._errors or len(self._errors) < DISTINCT_ERRORS_MAX:
            self._errors[key] = self._errors.get(key, 0) + 1
        else:
            self._errors[OTHER_ERRORS] = self._errors.get(OTHER_ERRORS, 0) + 1
        if len(self._samples) < self.examples:
            self._samples.append({"id": record_id, "error": error})
        if self._in_window <= self.threshold:
            return None
        if self._last_fired is not None and now - self._last_fired < self.window:
            return None
        notice = systemic_notice(self.queue, self._in_window, self.window, dict(self._errors), list(self._samples))
        self._last_fired = now
        self._errors.clear()
        self._samples.clear()
        return notice

    def failed(self, record_id: str, error: str) -> None:
        """Count one failure, and notify if the queue has just crossed into (or is still in) systemic failure."""
        notice = self.record(record_id, error)
        if notice is not None:
            log.error("systemic action failures", queue=self.queue, failures=notice.details["failures"],
                      window=self.window)
            self.notifier.post(notice)

    def _expire(self, now: float) -> None:
        horizon = now - self.window
        while self._buckets and self._buckets[0][0] + 1 <= horizon:
            self._in_window -= self._buckets.popleft()[1]


class RedisDownWatch:
    """Redis unreachable for longer than ``threshold`` seconds gives one notice; its return gives another.

    A daemon calls :meth:`unavailable` whenever an operation fails with StoreUnavailable and :meth:`available`
    whenever one succeeds (cheap when nothing was wrong). Every daemon watches for itself: with Redis down they
    cannot agree on who should tell, and the mail digest keeps the duplicates few.
    """

    def __init__(self, notifier: Notifier, queue: str | None, threshold: float) -> None:
        self.notifier, self.queue, self.threshold = notifier, queue, threshold
        self.down_since: float | None = None
        self._notified = False

    @classmethod
    def from_settings(cls, notifier: Notifier, queue: str | None, mail: MailSettings) -> RedisDownWatch:
        return cls(notifier, queue, mail.redis_down_after)

    def on_unavailable(self, error: str, now: float | None = None) -> Notice | None:
        """Note a failure at ``now`` (monotonic); the redis-down notice once the outage outlasts the threshold."""
        now = time.monotonic() if now is None else now
        if self.down_since is None:
            self.down_since = now
        down_for = now - self.down_since
        if self._notified or down_for < self.threshold:
            return None
        self._notified = True
        return redis_down_notice(self.queue, down_for, error)

    def on_available(self, now: float | None = None) -> Notice | None:
        """Note a success; the redis-back notice if a redis-down notice went out for this outage."""
        if self.down_since is None:
            return None
        now = time.monotonic() if now is None else now
        down_for, notified = now - self.down_since, self._notified
        self.down_since, self._notified = None, False
        return redis_back_notice(self.queue, down_for) if notified else None

    def unavailable(self, error: str) -> None:
        notice = self.on_unavailable(error)
        if notice is not None:
            log.error("redis unreachable beyond the notice threshold", queue=self.queue, threshold=self.threshold)
            self.notifier.post(notice)

    def available(self) -> None:
        notice = self.on_available()
        if notice is not None:
            self.notifier.post(notice)
