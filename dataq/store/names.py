"""The names index: the records pushed lately, so that the web console finds a file by its name, a glob or its path
without scanning the records.

The push script adds each batch's new records to the ``names`` list as two elements, their ids and their stored
values (path, size, push time, source), each joined by newlines as the push received them: no work per record, so
the index costs a push the bytes it copies (``bench/name_index.py``). When ``names`` holds ``search_names``
records, the push renames it ``names_before`` (replacing the older one), so the index holds the newest
``search_names`` to twice as many records without a trim per batch.

A search reads the index a batch at a time, newest first (each read one batch: no command holds Redis for long),
and looks for the name in each batch's values with a regular expression that starts at a ``/`` and holds the
query's longest literal part (so :mod:`re` skips most bytes); what it finds is checked against the glob the
operator wrote with :func:`fnmatch.fnmatchcase`, on the file name or, for a query with a ``/``, the whole path.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from dataq.store.base import StoreBase
from dataq.store.connection import translated

GLOB_CHARS = "*?["
_SEGMENT = r"[^/\x00\n]*"
"""What a file name may hold in a stored value: it ends at the NUL before the size, and never spans a line."""


@dataclass(frozen=True, slots=True)
class NameHit:
    """A record the names index holds: its file name, id, path and size as it was pushed."""

    name: str
    id: str
    path: str
    size: int


def _literals(glob: str) -> list[str]:
    """The parts of a glob outside its wildcards and brackets."""
    return [part for part in re.split(r"\[[^\]]*\]?|[*?]", glob) if part]


@dataclass(frozen=True, slots=True)
class NameQuery:
    """What the operator typed: a file name or a glob of one, or a path (it holds a ``/``) or a glob of one."""

    text: str

    @property
    def is_path(self) -> bool:
        return "/" in self.text

    @property
    def name_glob(self) -> str:
        """The glob the file name must match (of a path query: its last part)."""
        return self.text.rsplit("/", 1)[-1]

    def candidates(self) -> re.Pattern[str]:
        """A pattern that finds, in a batch's values, every file name the query may match (and a few more): its
        groups are the name and the size."""
        glob = self.name_glob
        literals = _literals(glob)
        if not any(c in glob for c in GLOB_CHARS):
            name = re.escape(glob)
        elif literals:
            longest = max(literals, key=len)
            start = re.escape(longest) if glob.startswith(longest) else _SEGMENT + re.escape(longest)
            name = start + _SEGMENT
        else:
            name = _SEGMENT
        return re.compile(rf"/({name})\x00(\d+)\x00")

    def matches(self, name: str, path: str) -> bool:
        """The glob matches, or the text is the name (or path) itself: ``obs[1].fits`` is found as written."""
        subject = path if self.is_path else name
        return subject == self.text or fnmatch.fnmatchcase(subject, self.text)


class NameOps(StoreBase):
    @translated
    async def find_names(self, query: NameQuery, limit: int) -> list[NameHit]:
        """The records of the names index that match ``query``, newest first, at most ``limit``, each id once."""
        pattern = query.candidates()
        found: list[NameHit] = []
        seen: set[str] = set()
        async for ids, values in self._batches():
            for hit in _hits(pattern, query, ids, values):
                if hit.id not in seen:
                    seen.add(hit.id)
                    found.append(hit)
                    if len(found) >= limit:
                        return found
        return found

    @translated
    async def find_id(self, record_id: str, query: NameQuery) -> NameHit | None:
        """The record ``record_id`` as the index holds it, under a name ``query`` matches (None: not there)."""
        pattern = query.candidates()
        async for ids, values in self._batches():
            if record_id in ids:
                for hit in _hits(pattern, query, ids, values):
                    if hit.id == record_id:
                        return hit
        return None

    async def _batches(self) -> AsyncIterator[tuple[str, str]]:
        """Each batch of the index, newest first: its ids and its values, each joined by newlines. Read by places
        counted from the tail, which pushes (at the head) do not move."""
        for key in (self.keys.names, self.keys.names_before):
            length: int = await self.r.llen(key)
            for index in range(-length, 0, 2):
                pair: list[str] = await self.r.lrange(key, index, index + 1)
                if len(pair) < 2:  # a renaming meanwhile: the rest is in the other list
                    break
                yield pair[0], pair[1]


def _hits(pattern: re.Pattern[str], query: NameQuery, ids: str, values: str) -> list[NameHit]:
    """The records of one batch the query matches, in the batch's order."""
    hits: list[NameHit] = []
    split_ids: list[str] | None = None
    line, counted = 0, 0
    for match in pattern.finditer(values):
        start = values.rfind("\n", 0, match.start()) + 1
        path, name = values[start:match.end(1)], match.group(1)
        if "\x00" in path or not query.matches(name, path):
            continue
        line += values.count("\n", counted, start)
        counted = start
        split_ids = split_ids if split_ids is not None else ids.split("\n")
        if line < len(split_ids):
            hits.append(NameHit(name, split_ids[line], path, int(match.group(2))))
    return hits


__all__ = ["NameHit", "NameOps", "NameQuery"]
