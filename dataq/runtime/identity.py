"""Who a process is in the worker registry."""

from __future__ import annotations

import os
import re
import secrets
import socket


def make_worker_id(role: str) -> str:
    """A worker id unique across hosts and restarts: ``host:pid:role:random``."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    return f"{host}:{os.getpid()}:{role}:{secrets.token_hex(3)}"
