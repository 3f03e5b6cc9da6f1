"""Audit questions: how an audit asks a site what it holds of records, its stored copies included, and the answers.

A site's audit asks each site of its chain in turn with lines of ids (100 per line; a push daemon takes at most
1,000)::

    {"audit": ["<id>", ...], "site": "<the asking site's name>"}

and the push daemon answers, in order with the connection's other lines, one line per id, with what *this* site
holds of it (not what it last heard from further on: the audit asks every site itself, afresh)::

    {"id": ID, "audit": STATE, "site": S, "next": [ADDRESS, ...], "at": T, "error": E,
     "copy": "present" | "missing" | "corrupt" | "unknown", "path": P}

``STATE`` is ``queued``, ``delayed``, ``inactive`` (with ``error``, its last), ``custody`` (handed on, waiting for
the end of the chain), ``done``, ``lost`` (done once, its stored copy found missing or damaged by an audit, with
``error`` saying why) or ``unknown``; ``at`` is when it was pushed (tracked) or done here; ``next`` names the push
daemons this site hands records on to (absent: the end of its chain). At a site whose queue stores copies
(``disk_store``, ``archive_ingest``), ``copy`` says whether a manifest names a copy of the record and whether it is
there with the size the manifest gives (:mod:`dataq.audit.copy_index`), or ``unknown`` when the site could not read
its manifests; ``copy`` is absent where no manifest names one. A malformed
line or id is answered ``Error: audit: ...``, as receipts are.

A question with ``"forward": N`` (and ``"within": SECONDS``, how long its asker waits) is passed on along the chain
(:mod:`dataq.audit.relay`): the answer about each id then adds, under ``further``, the answers of the sites after
this one in chain order, each an answer object as above (a refusal: ``{"id", "site", "refused"}``) or, for a site
that could not be asked, ``{"site": ADDRESS, "silent": WHY, "older": BOOL}``.

Only a push daemon whose handshake names ``audit`` (:class:`~dataq.handshake.Capability`) is asked.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from dataq.audit.copy_index import CopyIndex, copy_state
from dataq.custody.receipts import AUDIT_QUESTION_KEY, ReceiptQuery
from dataq.errors import InvalidRecord, ProtocolError
from dataq.logs import get_logger
from dataq.protocol import ERROR_PREFIX, clean_message
from dataq.store import CustodyEntry, Known, Lost, Tracked
from dataq.store.remembered import Done

AUDIT_KEY: Final = AUDIT_QUESTION_KEY
ERROR_BYTES: Final = ERROR_PREFIX.encode()
MARK: Final = b'{"audit"'
"""How every audit question starts (the client writes it so): the push daemon tells it from a record by this."""


class SiteState(enum.StrEnum):
    """What one site holds of a record."""

    QUEUED = "queued"
    DELAYED = "delayed"
    INACTIVE = "inactive"
    CUSTODY = "custody"
    DONE = "done"
    LOST = "lost"
    UNKNOWN = "unknown"


class CopyState(enum.StrEnum):
    """A storing site's copy of a record, as its manifests name it."""

    PRESENT = "present"
    MISSING = "missing"
    CORRUPT = "corrupt"
    UNKNOWN = "unknown"
    """The site stores copies but could not read its manifests to say (the audit cannot call it arrived)."""


log = get_logger()


_STATES: Final = {state.value: state for state in SiteState}
_COPIES: Final = {state.value: state for state in CopyState}
_text: Final[Callable[[str], str]] = json.encoder.encode_basestring
"""A string as JSON, quoted, not limited to ASCII (json.dumps's own, without its call per value)."""


def is_question(line: bytes) -> bool:
    """Whether a wire line is an audit question (checked before it is read as a record)."""
    return line.startswith(MARK)


@dataclass(frozen=True, slots=True)
class Silent:
    """A site that could not be asked about a record (its address): why, and whether it is too old to speak audit
    questions."""

    site: str
    reason: str
    older: bool = False

    def value(self) -> dict[str, Any]:
        return {"site": self.site, "silent": clean_message(self.reason), "older": self.older}


@dataclass(frozen=True, slots=True)
class Answer:
    """One site's answer about one id (``refused``: why the id was refused, and nothing else is said), and, when
    the question was passed on, the answers of the sites after it (``further``: theirs, or who was silent)."""

    record_id: str
    state: SiteState
    site: str
    next_sites: tuple[str, ...] = ()
    at: float | None = None
    error: str | None = None
    copy: CopyState | None = None
    path: str | None = None
    refused: str | None = None
    further: tuple[Answer | Silent, ...] = ()

    def line(self) -> str:
        """The answer line, with its newline: :meth:`value` as JSON, written out by hand (an archive answers
        100,000 of them per audit, and the generic encoder costs three times as much)."""
        if self.refused is not None:
            return f"{ERROR_PREFIX}{clean_message(self.refused)}\n"
        parts = ['{"id":', _text(self.record_id), ',"audit":"', self.state.value, '","site":', _text(self.site)]
        if self.next_sites:
            parts += [',"next":[', ",".join(map(_text, self.next_sites)), "]"]
        if self.at is not None:
            parts += [',"at":', repr(round(self.at, 3))]
        if self.error is not None:
            parts += [',"error":', _text(clean_message(self.error))]
        if self.copy is not None:
            parts += [',"copy":"', self.copy.value, '","path":', "null" if self.path is None else _text(self.path)]
        if self.further:
            parts += [',"further":', json.dumps([hop.value() for hop in self.further], separators=(",", ":"),
                                                ensure_ascii=False)]
        parts.append("}\n")
        return "".join(parts)

    def value(self) -> dict[str, Any]:
        """The answer as a JSON object (a refusal in ``further`` is one with its ``refused``)."""
        if self.refused is not None:
            return {"id": self.record_id, "site": self.site, "refused": clean_message(self.refused)}
        value: dict[str, Any] = {"id": self.record_id, AUDIT_KEY: self.state.value, "site": self.site}
        if self.next_sites:
            value["next"] = list(self.next_sites)
        if self.at is not None:
            value["at"] = round(self.at, 3)
        if self.error is not None:
            value["error"] = clean_message(self.error)
        if self.copy is not None:
            value["copy"] = self.copy.value
            value["path"] = self.path
        if self.further:
            value["further"] = [hop.value() for hop in self.further]
        return value


def parse_answer(line: bytes | str, record_id: str) -> Answer:
    """Read one answer line about ``record_id`` (an ``Error:`` line is its refusal); ProtocolError if it is none
    of the forms above, or about another id."""
    text = (line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line).rstrip("\r\n")
    if text.startswith(ERROR_PREFIX):
        return Answer(record_id, SiteState.UNKNOWN, "", refused=text[len(ERROR_PREFIX):])
    try:
        answer = _answer_of(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"unexpected audit answer {text[:200]!r}: {exc}") from None
    if answer.record_id != record_id:
        raise ProtocolError(f"the answer about {answer.record_id} came in the place of {record_id}")
    return answer


def parse_answers(lines: list[bytes], ids: list[str]) -> list[Answer]:
    """:func:`parse_answer` of each line, about each of ``ids`` in order: when none is a refusal, the lines are
    parsed as one JSON array (one call into the parser instead of one per line: a third of the time for 100,000)."""
    if any(line.startswith(ERROR_BYTES) for line in lines):
        return [parse_answer(line, record_id) for line, record_id in zip(lines, ids, strict=True)]
    try:
        values = json.loads(b"[" + b",".join(line.rstrip(b"\r\n") for line in lines) + b"]")
    except ValueError:
        return [parse_answer(line, record_id) for line, record_id in zip(lines, ids, strict=True)]
    if len(values) != len(ids) or not all(isinstance(value, dict) for value in values):
        return [parse_answer(line, record_id) for line, record_id in zip(lines, ids, strict=True)]
    answers = []
    for value, record_id in zip(values, ids, strict=True):
        try:
            answer = _answer_of(value)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProtocolError(f"unexpected audit answer {json.dumps(value)[:200]!r}: {exc}") from None
        if answer.record_id != record_id:
            raise ProtocolError(f"the answer about {answer.record_id} came in the place of {record_id}")
        answers.append(answer)
    return answers


def _answer_of(value: dict[str, Any], *, nested: bool = False) -> Answer:
    if nested and "refused" in value:
        return Answer(str(value["id"]), SiteState.UNKNOWN, str(value.get("site", "")), refused=str(value["refused"]))
    at, copy, next_sites, further = value.get("at"), value.get("copy"), value.get("next"), value.get("further")
    # Dictionaries rather than the enums' calls: an audit reads 100,000 answers.
    return Answer(str(value["id"]), _STATES[value[AUDIT_KEY]], str(value.get("site", "")),
                  tuple(map(str, next_sites)) if next_sites else (), float(at) if at is not None else None,
                  value.get("error"), _COPIES[copy] if copy is not None else None, value.get("path"), None,
                  () if nested or not further else tuple(map(_hop_of, further)))


def _hop_of(value: dict[str, Any]) -> Answer | Silent:
    """One of an answer's ``further`` hops (flat: theirs are listed in the first answer's, in chain order)."""
    if "silent" in value:
        return Silent(str(value["site"]), str(value["silent"]), bool(value.get("older", False)))
    return _answer_of(value, nested=True)


Copies = dict[str, tuple[CopyState, str]]
"""Per id, its copy's state and path at a storing site (absent: no manifest names one)."""


@dataclass(frozen=True, slots=True)
class AuditDesk:
    """Answers audit questions as site ``site``, whose queue deactivates records after ``max_errors`` failures,
    hands them on to ``next_sites`` and stores copies under ``root`` (None: it stores none), indexed in
    ``data_dir``."""

    site: str
    max_errors: int
    next_sites: tuple[str, ...] = ()
    root: str | None = None
    data_dir: str = ""

    def copies(self, ids: list[str]) -> Copies:
        """The stored copies of ``ids`` (blocking: reads the manifests' new lines and looks at the files)."""
        if self.root is None or not ids:
            return {}
        with CopyIndex(self.root, self.data_dir) as index:
            named = index.lookup(ids)
            missing = [record_id for record_id in ids if record_id not in named]
            # The manifests are read on only for ids the index lacks: copies stored since the last read are among
            # them, and an audit of a healthy archive then never lists its years of manifests per question.
            if missing and index.refresh():
                named.update(index.lookup(missing))
        found: Copies = {}
        for record_id, copies in named.items():
            state, path = copy_state(self.root, copies)
            found[record_id] = (CopyState(state), path)
        return found

    def copies_said(self, ids: list[str]) -> Copies:
        """:meth:`copies`, or, when the manifests cannot be read, each id's copy said ``unknown`` (and logged): an
        answer without a copy would read as "done, and keeps no manifest"."""
        try:
            return self.copies(ids)
        except Exception as exc:  # whatever a root's files hold, a push daemon must not die of it
            log.warning("cannot read the storing root's manifests to answer an audit question", error=repr(exc),
                        root=self.root)
            return dict.fromkeys(ids, (CopyState.UNKNOWN, ""))

    def answer(self, record_id: str, known: Known, copy: tuple[CopyState, str] | None) -> Answer:
        """What this site holds of ``record_id``."""
        state, at, error = _state_of(known)
        return Answer(record_id, state, self.site, self.next_sites, at, error,
                      copy[0] if copy else None, copy[1] if copy else None)

    def lines(self, query: ReceiptQuery, known: list[Known], copies: Copies) -> str:
        """The answer lines of one question, in order; ``known`` holds what is known of its valid ids, in order."""
        answers = iter(known)
        parts = []
        for item in query.ids:
            if isinstance(item, InvalidRecord):
                parts.append(Answer("", SiteState.UNKNOWN, self.site, refused=str(item)).line())
            else:
                parts.append(self.answer(item, next(answers), copies.get(item)).line())
        return "".join(parts)


def _state_of(known: Known) -> tuple[SiteState, float | None, str | None]:
    if isinstance(known, Tracked):
        return SiteState(known.state.value), known.pushed_at, known.last_error
    if isinstance(known, CustodyEntry):
        return SiteState.CUSTODY, known.handed_at, known.last.describe() if known.last else None
    if isinstance(known, Done):
        return SiteState.DONE, known.done_at, None
    if isinstance(known, Lost):
        return SiteState.LOST, known.at, known.why
    return SiteState.UNKNOWN, None, None
