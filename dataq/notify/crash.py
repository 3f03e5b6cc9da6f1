"""``dataq notify-crash UNIT``: mail the "crashed" notice for a failed unit (the units' ``OnFailure=`` hook).

``dataq-push@.service`` and ``dataq-pop@.service`` name ``dataq-notify-failure@%N.service`` in ``OnFailure=``;
systemd starts it when a daemon's unit enters the failed state (it crashed and ``Restart=`` gave up, or it
could not start), passing how the unit ended in ``$MONITOR_*`` variables (systemd 249+). A crashed daemon
cannot mail about itself, so this short-lived process does, with the same settings and the same mail code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence

from dataq.errors import ConfigError
from dataq.logs import configure_logging, get_logger
from dataq.notify.kinds import Notice, crashed_notice
from dataq.notify.mail import MailNotifier
from dataq.settings import MailSettings, load_settings

SEND_TIMEOUT = 60.0
"""Seconds spent trying to deliver (with retries), within the 90 s systemd gives a oneshot unit by default."""
RETRY_INITIAL, RETRY_CAP = 2.0, 15.0
"""Quicker retries than a daemon's: this process has a minute, not a lifetime."""
MONITOR_RESULT, MONITOR_EXIT_CODE = "MONITOR_SERVICE_RESULT", "MONITOR_EXIT_CODE"
MONITOR_EXIT_STATUS, MONITOR_INVOCATION_ID = "MONITOR_EXIT_STATUS", "MONITOR_INVOCATION_ID"
EXIT_OK, EXIT_NOT_SENT, EXIT_CONFIG = 0, 1, 3

log = get_logger()


def queue_of_unit(unit: str) -> str | None:
    """The queue a dataq unit serves: its instance name (``dataq-pop@transfer.service`` -> ``transfer``)."""
    _, at, instance = unit.removesuffix(".service").partition("@")
    return instance if at and instance else None


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
    await notifier.notify(*notice)
    return await notifier.close(within)


def main_crashed(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point of ``dataq notify-crash [--config FILE] UNIT``; returns the exit status.

    0: mailed, or mail is disabled (the crash is logged either way); 1: not delivered in time; 3: bad settings.
    """
    parser = argparse.ArgumentParser(prog="dataq notify-crash",
                                     description="Mail the 'crashed' notice for a failed dataq unit.")
    parser.add_argument("--config", default=None, help="Settings file (default: $DATAQ_CONFIG, else defaults).")
    parser.add_argument("--timeout", type=float, default=SEND_TIMEOUT, help="Seconds to keep trying.")
    parser.add_argument("unit", help="The failed unit, e.g. dataq-pop@transfer.service (%%N or %%n).")
    args = parser.parse_args(argv)
    env = os.environ if environ is None else environ
    try:
        settings = load_settings(args.config, environ=env)
        # stderr only: this runs under systemd, whose journal keeps it with the failed unit's invocation.
        configure_logging(component="notify-crash", level=settings.log.level, fmt=settings.log.format)
        notice = notice_from_environment(args.unit, env)
        log.error("dataq unit failed", unit=notice.details["unit"], result=notice.details["result"],
                  exit_code=notice.details["exit_code"], exit_status=notice.details["exit_status"])
        if not settings.mail.enabled:
            log.warning("mail is disabled ([mail] enabled = false): the crash is only logged")
            return EXIT_OK
        sent = asyncio.run(send_now(settings.mail, queue_of_unit(args.unit), notice, args.timeout, env))
    except ConfigError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK if sent else EXIT_NOT_SENT
