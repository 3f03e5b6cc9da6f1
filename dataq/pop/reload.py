"""What a running pop daemon takes again on SIGHUP (``systemctl reload``): its actions' ``windows``, ``bandwidth``
and ``max_connections`` (:data:`~dataq.actions.base.RELOADABLE`), read afresh from its settings file.

Any other change is logged as taking effect at the next start, and left alone. Settings that do not load (a
mistake in the file) are refused as a whole, logged with their error, and the daemon goes on with the ones in use:
a reload never stops a daemon.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from dataq.actions.base import RELOADABLE, Action
from dataq.actions.registry import options_of
from dataq.config import load_settings
from dataq.errors import ConfigError
from dataq.logs import get_logger

log = get_logger()


Change = tuple[Action[Any], Any]
"""An action and the options it takes (its running ones with the reloadable keys replaced)."""


def reloaded_options(source: str | None, queue: str, actions: Sequence[Action[Any]]) -> list[Change] | None:
    """The reloadable options the settings file ``source`` now says for ``queue``'s ``actions`` (blocking: it
    reads the file); None when the file does not load (logged: nothing changes)."""
    try:
        settings = load_settings(source)
        options = [options_of(settings.queue(queue), type(action), settings.source) for action in actions]
    except ConfigError as exc:
        log.error("settings not reloaded: the file has an error; the settings in use stay", error=str(exc))
        return None
    changes: list[Change] = []
    for action, new in zip(actions, options, strict=True):
        if new is None:
            log.warning("settings reloaded without an action the queue no longer names; it runs until the next start",
                        action=action.name)
            continue
        old = action.options
        if not dataclasses.is_dataclass(old) or isinstance(old, type):
            continue
        changed = [field.name for field in dataclasses.fields(old)
                   if getattr(old, field.name) != getattr(new, field.name)]
        later = [name for name in changed if name not in RELOADABLE]
        now = [name for name in changed if name in RELOADABLE]
        if later:
            log.warning("settings changed that take effect at the next start", action=action.name, keys=later)
        if now:
            changes.append((action, dataclasses.replace(old, **{name: getattr(new, name) for name in now})))
            log.info("settings reloaded", action=action.name, **{name: getattr(new, name) for name in now})
    return changes


def apply_reload(changes: Sequence[Change]) -> None:
    """Give each action its reloaded options (on the event loop, where the actions are read)."""
    for action, options in changes:
        action.reload(options)
