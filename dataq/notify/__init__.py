"""Telling operators: e-mail notices, rate limited and digested per kind, and the detectors that raise them.

::

    notifier = MailNotifier(settings.mail, queue)   # satisfies dataq.notices.Notifier
    notifier.start()
    await notifier.notify(*inactive_notice(queue, record.id, record.path, errors, last_error))
    failures = FailureWatch.from_settings(notifier, queue, settings.mail)
    await failures.failed(record.id, message)       # one "systemic" notice when a burst crosses the threshold
    redis = RedisDownWatch.from_settings(notifier, queue, settings.mail)
    await redis.unavailable(str(exc)) / await redis.available()
    ...
    await notifier.close()                          # sends what is pending, within a timeout

``main_crashed`` is ``dataq notify-crash UNIT``, the ``OnFailure=`` hook of the systemd units.
"""

from __future__ import annotations

from dataq.notices import KIND_INACTIVE, Notifier
from dataq.notify.crash import main_crashed, queue_of_unit
from dataq.notify.kinds import (
    KIND_CRASHED,
    KIND_READ_OFF,
    KIND_REDIS_BACK,
    KIND_REDIS_DOWN,
    KIND_SYSTEMIC,
    KINDS,
    Notice,
    activate_command,
    crashed_notice,
    inactive_notice,
    read_off_notice,
    redis_back_notice,
    redis_down_notice,
    render_text,
    systemic_notice,
)
from dataq.notify.mail import Digest, MailNotifier, read_password, send_message
from dataq.notify.watches import FailureWatch, RedisDownWatch

__all__ = [
    "KINDS",
    "KIND_CRASHED",
    "KIND_INACTIVE",
    "KIND_READ_OFF",
    "KIND_REDIS_BACK",
    "KIND_REDIS_DOWN",
    "KIND_SYSTEMIC",
    "Digest",
    "FailureWatch",
    "MailNotifier",
    "Notice",
    "Notifier",
    "RedisDownWatch",
    "activate_command",
    "crashed_notice",
    "inactive_notice",
    "main_crashed",
    "queue_of_unit",
    "read_off_notice",
    "read_password",
    "redis_back_notice",
    "redis_down_notice",
    "render_text",
    "send_message",
    "systemic_notice",
]
