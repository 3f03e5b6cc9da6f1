"""Actions: what the pop daemon runs on each record (see :mod:`dataq.actions.base` for the interface)."""

from __future__ import annotations

from dataq.errors import ActionError, Permanent, Retryable

from .base import Action, ActionContext, NoOptions
from .batcher import BatchOptions
from .registry import ENTRY_POINT_GROUP, load_actions

__all__ = ["ENTRY_POINT_GROUP", "Action", "ActionContext", "ActionError", "BatchOptions", "NoOptions", "Permanent",
           "Retryable", "load_actions"]
