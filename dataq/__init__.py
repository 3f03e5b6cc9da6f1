"""dataq: a resilient Redis-backed data queue that never loses track of a record."""

from __future__ import annotations

__version__ = "0.2.0"
