"""The console's search box: find records by id, file name, glob or path, in every queue.

An id is looked up directly (the records hash, the remembered done ids, custody: :meth:`QueueStore.whereabouts`);
a name, glob or path is looked up in each queue's names index (:mod:`dataq.store.names`), which the push keeps for
this, so a search never scans the records. Each record found comes with where it stands at this site now.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dataq.config import Settings
from dataq.errors import DataqError
from dataq.store import CustodyEntry, Known, Lost, NameQuery, QueueStore, Tracked
from dataq.store.remembered import Done

SEARCH_LIMIT = 50
"""Records one search shows at most, over every queue."""
MAX_QUERY = 4096
"""The longest query taken (a path is at most this long on Linux)."""
ANY_NAME = NameQuery("*")
_ID_LIKE = re.compile(r"[^\s/*?\[\]]{1,256}")


class BadQuery(DataqError):
    """A search the console cannot run: empty, too long, or holding a control character."""


def place_of(known: Known) -> str:
    """Where a record stands here, in a word or two, from what the site knows of its id."""
    if isinstance(known, Tracked):
        return known.state.value
    if isinstance(known, CustodyEntry):
        return "handed on"
    if isinstance(known, Done):
        return "done"
    if isinstance(known, Lost):
        return "lost"
    return "not tracked"


@dataclass(frozen=True, slots=True)
class Hit:
    queue: str
    id: str
    path: str | None
    size: int | None
    place: str
    by: str
    """What matched: ``id`` or ``name``."""

    def doc(self) -> dict[str, Any]:
        return {"queue": self.queue, "id": self.id, "path": self.path, "size": self.size, "place": self.place,
                "by": self.by}


class Search:
    """Searches the queues of ``stores`` (each with its settings' ``max_errors`` for where a record stands)."""

    def __init__(self, settings: Settings, stores: Mapping[str, QueueStore]) -> None:
        self.settings, self.stores = settings, stores

    async def run(self, text: str, limit: int = SEARCH_LIMIT) -> list[Hit]:
        text = text.strip()
        if not text:
            raise BadQuery("type an id, a file name, a glob such as obs_*.fits, or a path")
        if len(text) > MAX_QUERY or any(ord(c) < 32 for c in text):
            raise BadQuery(f"a search is at most {MAX_QUERY} characters, without control characters")
        hits: list[Hit] = []
        for queue, store in self.stores.items():
            max_errors = self.settings.queue(queue).max_errors if queue in self.settings.queues else 0
            if _ID_LIKE.fullmatch(text):
                (known,) = await store.whereabouts([text], max_errors)
                if known is not None:
                    # Its path from the records while it is tracked, else from the names index (never the event
                    # stream, which --show reads back through).
                    tracked = await store.records([text])
                    held = tracked[0] if tracked else await store.find_id(text, ANY_NAME)
                    hits.append(Hit(queue, text, held.path if held else None, held.size if held else None,
                                    place_of(known), "id"))
            found = await store.find_names(NameQuery(text), limit)
            if found:
                places = await store.whereabouts([hit.id for hit in found], max_errors)
                hits += [Hit(queue, hit.id, hit.path, hit.size, place_of(known), "name")
                         for hit, known in zip(found, places, strict=True)]
        return hits[:limit]


__all__ = ["SEARCH_LIMIT", "BadQuery", "Hit", "Search", "place_of"]
