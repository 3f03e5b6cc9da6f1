"""``dataq notify-crash UNIT``: mail the "crashed" notice for a failed unit (the units' ``OnFailure=`` hook).

``dataq-push@.service`` and ``dataq-pop@.service`` name ``dataq-notify-failure@%N.service`` in ``OnFailure=``;
systemd starts it when a daemon's unit enters the failed state (it crashed and ``Restart=`` gave up, or it
could not start), passing how the unit ended in ``$MONITOR_*`` variables (systemd 249+). A crashed daemon
cannot mail about itself, so this short-lived process does, with the same settings and the same mail code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from dataq.config import MailSettings, Settings
from dataq.logs import get_logger
from dataq.ops.mail import MailNotifier
from dataq.ops.notices import Notice, crashed_notice
from dataq.runtime.systemd import ONESHOT_SEND_TIMEOUT, unescape_instance

SEND_TIMEOUT = ONESHOT_SEND_TIMEOUT
"""Seconds spent trying to deliver (with retries), within the 90 s systemd gives a oneshot unit by default."""
RETRY_INITIAL, RETRY_CAP = 2.0, 15.0
"""Quicker retries than a daemon's: this process has a minute, not a lifetime."""
MONITOR_RESULT, MONITOR_EXIT_CODE = "MONITOR_SERVICE_RESULT", "MONITOR_EXIT_CODE"
MONITOR_EXIT_STATUS, MONITOR_INVOCATION_ID = "MONITOR_EXIT_STATUS", "MONITOR_INVOCATION_ID"
EXIT_OK, EXIT_NOT_SENT = 0, 1

log = get_logger()


def queue_of_unit(unit: str) -> str | None:
    """The queue a dataq unit serves: its instance name, unescaped (``dataq-pop@transfer.service`` ->
    ``transfer``, ``dataq-pop@raw\\x2ddata.service`` -> ``raw-data``)."""
    _, at, instance = unit.removesuffix(".service").partition("@")
    return unescape_instance(instance) if at and instance else None


def notice_from_environment(unit: str, environ: Mapping[str, str]) -> Notice:
    """The crashed notice for ``unit``, with how it ended as systemd told the ``OnFailure=`` unit."""
    return crashed_notice(
        unit if "." in unit else f"{unit}.service",
        result=environ.get(MONITOR_RESULT),
        exit_code=environ.get(MONITOR_EXIT_CODE),
        exit_status=environ.get(MONITOR_EXIT_STATUS),
        invocation_id=environ.get(MONITOR_INVOCATION_ID),
    )


async def send_now(mail: MailSettings, queue: str | None, notice: Notice, within: float = SEND_TIMEOUT,
                   environ: Mapping[str, str] | None = None) -> bool:
    """Mail one notice at once, retrying for up to ``within`` seconds; True once sent."""
    notifier = MailNotifier(mail, queue, environ=environ, retry_initial=RETRY_INITIAL, retry_cap=RETRY_CAP)
    notifier.start()
    notifier.post(notice)
    return await notifier.close(within)


def notify_crashed(settings: Settings, unit: str, environ: Mapping[str, str], within: float = SEND_TIMEOUT) -> int:
    """``dataq notify-crash UNIT``: log the crash and mail it; returns the exit status.

    0: mailed, or mail is disabled (the crash is logged either way); 1: not delivered within ``within`` seconds.
    Raises ConfigError for mail settings that cannot be used (a password file that is missing).
    """
    notice = notice_from_environment(unit, environ)
    log.error("dataq unit failed", unit=notice.details["unit"], result=notice.details["result"],
              exit_code=notice.details["exit_code"], exit_status=notice.details["exit_status"])
    if not settings.mail.enabled:
        log.warning("mail is disabled ([mail] enabled = false): the crash is only logged")
        return EXIT_OK
    sent = asyncio.run(send_now(settings.mail, queue_of_unit(unit), notice, within, environ))
    return EXIT_OK if sent else EXIT_NOT_SENT
