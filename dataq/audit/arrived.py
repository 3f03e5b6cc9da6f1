"""Arrived questions: the one thing an audit asks the end of a chain about most files, asked in its cheapest form.

Once an audit knows where its chain ends (:class:`~dataq.audit.chain.Ends`), it asks that site first whether each
file has arrived there, and follows only the others site by site. On a healthy chain that is every file but a few,
so the question and its answer are made to cost little per id on both sides: the site looks up the copies its
manifests name and looks at each (its Redis is not read: only the stored copy proves a file arrived), and answers a
whole line of ids with one line of marks::

    {"arrived": ["<id>", ...], "site": "<the asking site's name>"}      (1,000 ids at most)
    {"arrived": "1101-0", "site": "<the answering site's name>"}         one mark per id, in order

``1``: this site is the end of its chain (it hands nothing on) and a manifest names a copy of the record that is
there with the size the manifest gives; ``0``: anything else (no such copy, a copy missing or damaged, a site that
hands records on or keeps no manifest, manifests it could not read); ``-``: the id fails the queue's checksum
pattern. A ``0`` says nothing of *why*: the audit asks the full audit question (:mod:`dataq.audit.questions`) about
those ids, which does. A malformed line is answered ``Error: arrived: ...``.

Only a push daemon whose handshake names ``arrived`` is asked (an older one is asked the full question about every
id). Rucio's consistency checks work the same way round: a bulk comparison first, the expensive look only at the
differences.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Sequence
from typing import Final

from dataq.audit.copy_index import CopyIndex
from dataq.audit.questions import AuditDesk
from dataq.custody.receipts import ARRIVED_QUESTION_KEY, ReceiptQuery
from dataq.errors import InvalidRecord, ProtocolError
from dataq.logs import get_logger
from dataq.protocol import ERROR_PREFIX

ARRIVED_KEY: Final = ARRIVED_QUESTION_KEY
MARK: Final = b'{"arrived"'
"""How every arrived question starts (the asker writes it so): the push daemon tells it from a record by this."""
HERE, NOT_PROVEN, REFUSED = "1", "0", "-"
IDS_PER_QUESTION: Final = 1000
"""Ids per question line: as many as one line may name."""

log = get_logger()


def is_arrived_question(line: bytes) -> bool:
    """Whether a wire line is an arrived question (checked before it is read as a record)."""
    return line.startswith(MARK)


def question_line(ids: Sequence[str], site: str) -> bytes:
    """The arrived question about ``ids`` (at most :data:`IDS_PER_QUESTION`), with its newline."""
    return b'{"arrived":' + json.dumps(list(ids), separators=(",", ":")).encode() + b',"site":' \
        + json.dumps(site).encode() + b"}\n"


def answer_line(marks: str, site: str) -> str:
    """The answer line to one arrived question: ``marks``, one per id, as the answering site ``site``."""
    return f'{{"arrived":"{marks}","site":{json.dumps(site, ensure_ascii=False)}}}\n'


def parse_answer(line: bytes, count: int) -> tuple[str, str]:
    """(marks, answering site) of one answer line to a question about ``count`` ids; ProtocolError if it is not
    one (an ``Error:`` line included: the asker's own question was malformed)."""
    if line.startswith(ERROR_PREFIX.encode()):
        raise ProtocolError(f"an arrived question was refused: {line[len(ERROR_PREFIX):].decode(errors='replace')!r}")
    try:
        value = json.loads(line)
        marks, site = value[ARRIVED_KEY], value["site"]
        if not isinstance(marks, str) or not isinstance(site, str):
            raise TypeError("marks and site must be strings")
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"unexpected arrived answer {line[:200]!r}: {exc}") from None
    if len(marks) != count or marks.strip(HERE + NOT_PROVEN + REFUSED):
        raise ProtocolError(f"an arrived answer of {len(marks)} marks, not {count} of 1, 0 and -: {marks[:80]!r}")
    return marks, site


def arrived_lines(desk: AuditDesk, queries: list[ReceiptQuery]) -> list[str]:
    """The answer line of each arrived question, in order, as ``desk``'s site (blocking: reads the manifests' index
    and looks at the files)."""
    ids = [item for query in queries for item in query.valid]
    try:
        present = _present(desk, ids)
    except Exception as exc:  # whatever a root's files hold, a push daemon must not die of it
        log.warning("cannot read the storing root's manifests to answer an arrived question", error=repr(exc),
                    root=desk.root)
        present = set()
    return [answer_line("".join(REFUSED if isinstance(item, InvalidRecord) else HERE if item in present
                                else NOT_PROVEN for item in query.ids), desk.site) for query in queries]


def _present(desk: AuditDesk, ids: list[str]) -> set[str]:
    """Those of ``ids`` whose copy a manifest names and is there with its size, at a site that hands nothing on."""
    if desk.next_sites or desk.root is None or not ids:
        return set()
    present: set[str] = set()
    named: set[str] = set()
    # Each copy looked at relative to the root, kept open: the root's own path is resolved once, not per copy.
    root = os.open(desk.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def look(copies: Iterable[tuple[str, bytes, int | None]]) -> None:
        for record_id, path, size in copies:
            named.add(record_id)
            if record_id in present:
                continue
            try:
                info = os.stat(path, dir_fd=root, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and (size is None or info.st_size == size):
                present.add(record_id)

    try:
        with CopyIndex(desk.root, desk.data_dir) as index:
            look(index.copies_of(ids))
            unnamed = [record_id for record_id in ids if record_id not in named]
            # As for the full question: the manifests are read on only when the index lacks an id.
            if unnamed and index.refresh():
                look(index.copies_of(unnamed))
    finally:
        os.close(root)
    return present
