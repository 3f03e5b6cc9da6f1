"""What dataq tells an operator: one builder per kind of notice, and the notifiers that deliver them.

A notice is a :class:`Notice` (kind, subject, details). Every part of a daemon that has something to tell
hands it to the one :class:`Notifier` the daemon holds, with :meth:`Notifier.post`, which returns at once and
never raises: delivery (rate limited, digested, retried: :mod:`dataq.ops.mail`) happens in the background, so a
slow or failing mail server never holds up the work. ``kind`` is what rate limiting and digests group by.
Commands in a notice are exact (shell-quoted), so an operator can paste them.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from dataq.logs import get_logger

KIND_INACTIVE = "inactive"
"""Records moved to the inactive queue (too many failures, or a crash loop)."""

KIND_SYSTEMIC = "systemic"
"""More action failures than ``mail.systemic_failures`` within ``mail.systemic_window`` on a queue."""
KIND_READ_OFF = "read-off"
"""The push daemon switched ``read`` off: the active queue reached ``max_queue_size``, or Redis's memory
``[push] max_memory``."""
KIND_READ_ON = "read-on"
"""The push daemon switched ``read`` back on: what made it switch it off is gone."""
KIND_REDIS_DOWN = "redis-down"
"""Redis unreachable for longer than ``mail.redis_down_after``."""
KIND_REDIS_BACK = "redis-back"
"""Redis reachable again after a redis-down notice."""
KIND_CRASHED = "crashed"
"""A daemon's unit failed: it crashed and systemd gave up restarting it (the unit's ``OnFailure=`` hook)."""
KIND_UNREACHABLE = "unreachable"
"""A destination of a queue's actions became unreachable: its records wait (``[pop] unreachable_after``)."""
KIND_REACHABLE = "reachable"
"""A destination reachable again after an unreachable notice: its records flow again."""
KIND_RECEIPT_OVERDUE = "receipt-overdue"
"""Records handed on to the next site have waited for their receipt longer than ``receipt_alarm``."""
KIND_AUDIT = "audit"
"""A scheduled audit found files that did not arrive or copies that are not intact, or could not run."""
KINDS = (KIND_INACTIVE, KIND_SYSTEMIC, KIND_READ_OFF, KIND_READ_ON, KIND_REDIS_DOWN, KIND_REDIS_BACK, KIND_CRASHED,
         KIND_UNREACHABLE, KIND_REACHABLE, KIND_RECEIPT_OVERDUE, KIND_AUDIT)

CLI = "dataq-cli"
SUBJECT_MAX = 200
"""Characters of a subject line kept (a long last error belongs in the body)."""
TEXT_MAX = 2000
"""Characters of one detail value kept in a mail (a traceback is cut, not mailed whole)."""
CONTINUATION_INDENT = " " * 6

log = get_logger()


class Notice(NamedTuple):
    """One thing to tell an operator."""

    kind: str
    subject: str
    details: Mapping[str, object]


class Notifier(Protocol):
    """Delivers notices to an operator (the log, e-mail, ...)."""

    def post(self, notice: Notice) -> None:
        """Take ``notice`` for delivery; returns at once and never raises."""


class LogNotifier:
    """The notifier without mail: a warning in the daemon's log."""

    def post(self, notice: Notice) -> None:
        log.warning("notice", kind=notice.kind, subject=notice.subject, details=dict(notice.details))


def activate_command(queue: str, first: str, last: str | None = None) -> str:
    """The command that moves the inactive records ``first`` .. ``last`` back to the active queue."""
    return shlex.join([CLI, "--queue", queue, "--activate", first, last or first])


def read_on_command(queue: str) -> str:
    return shlex.join([CLI, "--queue", queue, "--read", "on"])


def list_inactive_command(queue: str) -> str:
    return shlex.join([CLI, "--queue", queue, "--list", "inactive"])


def inactive_records_notice(queue: str, worker: str, max_errors: int, records: Sequence[Mapping[str, Any]]
                            ) -> Notice:
    """Records one settlement moved to the inactive queue, each with its last error (and, once mailed, the
    command that retries it)."""
    return Notice(
        KIND_INACTIVE,
        f"{len(records)} record(s) of queue {queue} moved to the inactive queue after more than {max_errors} "
        "failure(s)",
        {"queue": queue, "worker": worker, "reason": "failures", "records": list(records)},
    )


def crash_loop_notice(queue: str, worker: str, deactivated: int, max_crashes: int) -> Notice:
    """Records of a dead worker moved to the inactive queue: their workers died while running them too often."""
    return Notice(
        KIND_INACTIVE,
        f"{deactivated} record(s) of queue {queue} moved to the inactive queue: their workers died while running "
        f"them more than {max_crashes} time(s)",
        {"queue": queue, "worker": worker, "reason": "crashes", "count": deactivated},
    )


def systemic_notice(queue: str, failures: int, window: float, error_counts: Mapping[str, int],
                    samples: Sequence[Mapping[str, str]]) -> Notice:
    """More than the tolerated number of failures within the window: counts by error, and sample failures."""
    by_error = sorted(error_counts.items(), key=lambda item: -item[1])
    return Notice(
        KIND_SYSTEMIC,
        f"systemic failure on queue {queue}: {failures} action failures within {window:g} s",
        {"queue": queue, "failures": failures, "window_seconds": window,
         "errors_by_message": [f"{count} x {message}" for message, count in by_error],
         "samples": list(samples),
         "pause": shlex.join([CLI, "--queue", queue, "--action", "off"]),
         "after_the_fix": f"{shlex.join([CLI, '--queue', queue, '--redo'])} (every inactive record back to the "
                          f"active queue), then {shlex.join([CLI, '--queue', queue, '--action', 'on'])}"},
    )


def read_off_notice(queue: str, active: int, max_queue_size: int, resume_below: int | None) -> Notice:
    """``read`` switched off because the queue is full, and how reading comes back on."""
    resume = (f"automatically once fewer than {resume_below} records are active" if resume_below is not None
              else "only by hand ([push] resume_below is not set)")
    return Notice(
        KIND_READ_OFF,
        f"queue {queue} is full ({active} active records): reading from feeders is switched off",
        {"queue": queue, "active": active, "max_queue_size": max_queue_size, "read_comes_back_on": resume,
         "re_enable": read_on_command(queue)},
    )


def memory_high_notice(queue: str, used: int, limit: int, resume: int) -> Notice:
    """``read`` switched off because Redis's memory passed ``[push] max_memory``."""
    return Notice(
        KIND_READ_OFF,
        f"queue {queue}: Redis uses {_mib(used)} of memory, past the {_mib(limit)} limit: reading from feeders "
        "is switched off",
        {"queue": queue, "used_memory": used, "max_memory": limit,
         "read_comes_back_on": f"automatically once Redis uses less than {_mib(resume)}",
         "effect": "feeders' lines wait, unanswered, and nothing is lost; drain the queue or give Redis memory",
         "re_enable": read_on_command(queue)},
    )


def read_on_notice(queue: str, reason: str) -> Notice:
    """``read`` switched back on by the push daemon (what made it switch it off is gone)."""
    return Notice(KIND_READ_ON, f"queue {queue}: reading from feeders is switched back on ({reason})",
                  {"queue": queue, "why": reason})


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def redis_down_notice(queue: str | None, down_for: float, error: str) -> Notice:
    return Notice(
        KIND_REDIS_DOWN,
        f"Redis unreachable for {down_for:.0f} s" + (f" (queue {queue})" if queue else ""),
        {"queue": queue or "", "down_for_seconds": round(down_for, 1), "last_error": error,
         "effect": "feeders get no acknowledgements and no action runs until Redis is back; nothing is lost"},
    )


def redis_back_notice(queue: str | None, down_for: float) -> Notice:
    return Notice(
        KIND_REDIS_BACK,
        f"Redis reachable again after {down_for:.0f} s" + (f" (queue {queue})" if queue else ""),
        {"queue": queue or "", "down_for_seconds": round(down_for, 1)},
    )


def unreachable_notice(queue: str, worker: str, destination: str, error: str) -> Notice:
    """A destination is unreachable: its records wait in the active list, probed with back-off."""
    return Notice(
        KIND_UNREACHABLE,
        f"queue {queue}: {destination} is unreachable; its records wait",
        {"queue": queue, "destination": destination, "worker": worker, "last_error": error,
         "effect": "records wait in the active list, their failures not counted; one at a time is sent as a "
                   "probe, with growing intervals, and the queue resumes by itself once one gets through",
         "see": shlex.join([CLI, "--queue", queue, "--summary"])},
    )


def reachable_notice(queue: str, worker: str, destination: str, down_for: float) -> Notice:
    return Notice(
        KIND_REACHABLE,
        f"queue {queue}: {destination} reachable again after {down_for:.0f} s",
        {"queue": queue, "destination": destination, "worker": worker, "down_for_seconds": round(down_for, 1)},
    )


def receipt_overdue_notice(queue: str, site: str, alarm: float, oldest_age: float, oldest_id: str,
                           examples: Sequence[Mapping[str, object]]) -> Notice:
    """Records handed on whose receipt is later than ``alarm`` seconds: the oldest, and a few of them."""
    return Notice(
        KIND_RECEIPT_OVERDUE,
        f"queue {queue} at {site}: records wait for their receipt for over {alarm:g} s (oldest {oldest_age:.0f} s)",
        {"queue": queue, "site": site, "receipt_alarm": alarm, "examples": list(examples),
         "effect": "their sources are kept (after_receipt) and custody keeps asking; a next site that does not know "
                   "a record is sent it again after resend_after",
         "see": f"{shlex.join([CLI, '--queue', queue, '--summary'])}; "
                f"{shlex.join([CLI, '--queue', queue, '--trace', oldest_id])}"},
    )


def crashed_notice(unit: str, result: str | None = None, exit_code: str | None = None,
                   exit_status: str | None = None, invocation_id: str | None = None) -> Notice:
    """A daemon's unit failed (systemd gave up restarting it): which, how, and where its last words are."""
    journal = ["journalctl", "-u", unit, "-n", "100"]
    if invocation_id:
        journal = ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation_id}"]
    return Notice(
        KIND_CRASHED,
        f"{unit} stopped by a crash" + (f" ({result})" if result else ""),
        {"unit": unit, "result": result or "unknown", "exit_code": exit_code or "unknown",
         "exit_status": exit_status or "unknown", "log": shlex.join(journal),
         "restart": shlex.join(["systemctl", "reset-failed", unit]) + " && "
                    + shlex.join(["systemctl", "start", unit])},
    )


def render_text(kind: str, details: Mapping[str, object]) -> str:
    """A notice's details as plain text, one ``key: value`` line each (lists and records indented).

    Records of an inactive notice that lack a retry command get one, whichever daemon built the notice.
    """
    queue = str(details.get("queue") or "")
    lines: list[str] = []
    for key, value in details.items():
        label = key.replace("_", " ")
        if isinstance(value, Mapping):
            lines.append(f"{label}:")
            lines += [f"    {k.replace('_', ' ')}: {_clip(v)}" for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            lines.append(f"{label}: ({len(value)})")
            for item in value:
                if isinstance(item, Mapping):
                    entry = dict(item)
                    if kind == KIND_INACTIVE and queue and "id" in entry and "retry" not in entry:
                        entry["retry"] = activate_command(queue, str(entry["id"]))
                    lines.append("  - " + "\n    ".join(f"{k.replace('_', ' ')}: {_clip(v)}" for k, v in entry.items()))
                else:
                    lines.append(f"  - {_clip(item)}")
        else:
            lines.append(f"{label}: {_clip(value)}")
    if kind == KIND_INACTIVE and queue and "id" not in details and "records" not in details:
        lines.append(f"see them with: {list_inactive_command(queue)}")
    return "\n".join(lines)


def one_line(text: str, limit: int = SUBJECT_MAX) -> str:
    """``text`` on one line (headers cannot hold a newline) and at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _clip(value: object) -> str:
    """A value cut to :data:`TEXT_MAX` characters, its later lines indented under the first (a traceback)."""
    text = str(value).rstrip("\n")
    if len(text) > TEXT_MAX:
        text = text[:TEXT_MAX] + f"… ({len(text) - TEXT_MAX} more characters)"
    return text.replace("\n", "\n" + CONTINUATION_INDENT)
