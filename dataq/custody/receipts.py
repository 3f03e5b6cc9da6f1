"""Receipts: the wire form by which a site asks the next one about records it handed on, and the answers.

A site in a cascade asks its next site's push daemon, over the connection it hands records on with, about the
records in its custody (:mod:`dataq.store.custody`) with one line::

    {"receipts": ["<id>", ...], "site": "<the asking site's name>"}

(``site`` is optional). The push daemon answers, in order with the other lines of the connection, one line per
id: a JSON object line ::

    {"id": ID, "receipt": "done", "site": S, "at": T, ...}      done at S and, if S hands records on, at the end
                                                                of its chain, which had it at time T
    {"id": ID, "receipt": "pending", "site": S, "state": ...}   somewhere from here on: at site S, in state
                                                                ``queued``, ``delayed``, ``inactive`` (with
                                                                ``error``) or ``custody`` (waiting for S's next)
    {"id": ID, "receipt": "unknown", "site": S}                 no site from S on holds it (with ``error``
                                                                ``lost: ...`` and ``lost``, a time, where an audit
                                                                found S's stored copy missing or damaged)

or ``Error: receipts: ...`` for an id that fails the queue's checksum pattern. A line that is not valid JSON,
names anything else than a list of at most :data:`MAX_RECEIPT_IDS` ids, gets one ``Error: receipts: ...`` line in
its place. Answers may carry more fields, for ``dataq-cli --trace``: ``from`` (the answering site), ``pushed``,
``done`` (its own times), ``handed`` (when it handed the record on), ``next`` (where it hands records on).

Only a push daemon whose handshake names ``receipts`` (:mod:`dataq.handshake`) is asked: an older one would read
the line as a record and refuse it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Final

from dataq.errors import InvalidRecord, ProtocolError
from dataq.protocol import ERROR_PREFIX, clean_message
from dataq.record import RecordRules
from dataq.store.custody import LastAnswer

RECEIPTS_KEY: Final = "receipts"
MAX_RECEIPT_IDS: Final = 1000
"""Ids one receipts line may name: its answers must fit the connection's window of unanswered lines."""
ERROR_TOPIC: Final = "receipts: "
"""How the push daemon words its refusals of receipts lines and ids: keepers of dataq 0.1, before the handshake,
tell a refused id from a daemon that does not know receipts by it (this version reads no refusal's words)."""


class ReceiptKind(enum.StrEnum):
    """What a site answers about one id (its wire word)."""

    DONE = "done"
    """Done there and, if it hands records on, at the end of its chain."""
    PENDING = "pending"
    """Somewhere from there on: at ``site``, in ``state``."""
    UNKNOWN = "unknown"
    """No site from there on holds it."""
    REFUSED = "error"
    """The id was refused (it fails the queue's checksum pattern)."""


_MARKER: Final = b'"receipts"'
AUDIT_QUESTION_KEY: Final = "audit"
"""The key of an audit question (:mod:`dataq.audit.questions`, which this module cannot import)."""
ARRIVED_QUESTION_KEY: Final = "arrived"
"""The key of an arrived question (:mod:`dataq.audit.arrived`)."""
FORWARD_KEYS: Final = ("forward", "within")
"""The keys only an audit question may carry: it is passed on along the chain."""


@dataclass(frozen=True, slots=True)
class ReceiptQuery:
    """One receipts line (or, with ``key`` ``"audit"``, an audit question: :mod:`dataq.audit.questions`) as the push
    daemon read it: per id, the id, or why it is refused (an ``InvalidRecord``)."""

    ids: list[str | InvalidRecord]
    asker: str | None = None
    key: str = RECEIPTS_KEY
    forward: int = 0
    """An audit question: how many sites further on the answering site passes it on to (0: none)."""
    within: float | None = None
    """An audit question passed on: the seconds its asker waits for the answers."""

    @property
    def valid(self) -> list[str]:
        return [item for item in self.ids if isinstance(item, str)]


def is_query(line: bytes) -> bool:
    """Whether a wire line is a receipts query (checked before it is read as a record)."""
    return line.startswith(b"{") and _MARKER in line


def parse_query(line: bytes, rules: RecordRules, key: str = RECEIPTS_KEY) -> ReceiptQuery:
    """Read a receipts line (an audit question with ``key`` ``"audit"``); InvalidRecord (its message starts with
    ``receipts:``, ``audit:``) if the line is malformed."""
    topic = f"{key}: "
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"{topic}not a JSON object: {exc}") from None
    if not isinstance(value, dict) or key not in value:
        raise InvalidRecord(f"{topic}the line must be a JSON object with the key {key!r}")
    allowed = {key, "site", *FORWARD_KEYS} if key == AUDIT_QUESTION_KEY else {key, "site"}
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise InvalidRecord(f"{topic}unknown key {unknown[0]!r}; the keys are {', '.join(map(repr, sorted(allowed)))}")
    ids, asker = value[key], value.get("site")
    if not isinstance(ids, list):
        raise InvalidRecord(f"{topic}{key!r} must be a list of ids")
    if len(ids) > MAX_RECEIPT_IDS:
        raise InvalidRecord(f"{topic}{len(ids)} ids in one line; at most {MAX_RECEIPT_IDS}")
    if asker is not None and not isinstance(asker, str):
        raise InvalidRecord(f"{topic}'site' must be a string")
    forward, within = value.get("forward", 0), value.get("within")
    if not isinstance(forward, int) or isinstance(forward, bool) or forward < 0:
        raise InvalidRecord(f"{topic}'forward' must be a whole number of sites, 0 or more")
    if within is not None and (not isinstance(within, (int, float)) or isinstance(within, bool)
                               or not 0 < within < float("inf")):
        raise InvalidRecord(f"{topic}'within' must be a positive number of seconds")
    checked: list[str | InvalidRecord] = []
    for item in ids:
        if not isinstance(item, str):
            checked.append(InvalidRecord(f"{topic}an id must be a string, got {json.dumps(item)[:80]}"))
            continue
        try:
            checked.append(rules.check_checksum(item))
        except InvalidRecord as exc:
            checked.append(InvalidRecord(f"{topic}{exc}"))
    return ReceiptQuery(checked, asker, key, forward, float(within) if within is not None else None)


def query_line(ids: list[str], site: str, key: str = RECEIPTS_KEY, *, forward: int = 0,
               within: float | None = None) -> bytes:
    """The receipts line (``key`` ``"audit"``: the audit question, passed on ``forward`` sites further, whose
    asker waits ``within`` seconds) a site sends about ``ids``, with its newline."""
    value: dict[str, Any] = {key: ids, "site": site}
    if forward:
        value["forward"] = forward
    if within is not None:
        value["within"] = round(within, 3)
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


@dataclass(frozen=True, slots=True)
class Receipt:
    """One answer about one id."""

    kind: ReceiptKind
    record_id: str = ""
    site: str = ""
    """Where the record is (pending), had it last (done), or the site that does not know it (unknown)."""
    at: float | None = None
    """Done: when the end of the chain had it."""
    state: str | None = None
    error: str | None = None
    """Pending: the record's last error there; error: why the id was refused."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The answer's other fields (``from``, ``pushed``, ``done``, ``handed``, ``next``)."""

    def line(self) -> str:
        """The answer line, with its newline."""
        if self.kind == ReceiptKind.REFUSED:
            return f"{ERROR_PREFIX}{clean_message(self.error or '')}\n"
        value: dict[str, Any] = {"id": self.record_id, "receipt": self.kind, "site": self.site}
        if self.at is not None:
            value["at"] = round(self.at, 3)
        if self.state is not None:
            value["state"] = self.state
        if self.error is not None:
            value["error"] = clean_message(self.error)
        value.update(self.extra)
        return json.dumps(value, separators=(",", ":")) + "\n"

    def last_answer(self, note: str | None = None) -> LastAnswer:
        """The answer as a custody entry keeps it, with what the asking site adds (``note``)."""
        error = self.error if self.kind in (ReceiptKind.PENDING, ReceiptKind.REFUSED) else None
        return LastAnswer(self.kind.value, self.site, self.state, error, note)

    def describe(self) -> str:
        """One line for operators: ``done at S``, ``pending at S: queued``, ``unknown at S``."""
        return self.last_answer().describe()


def parse_answer(line: bytes | str) -> Receipt:
    """Read one answer line (an ``Error:`` line is the refusal of its id, in the words of the answering site);
    ProtocolError if it is none of the forms above."""
    text = (line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line).rstrip("\r\n")
    if text.startswith(ERROR_PREFIX):
        return Receipt(ReceiptKind.REFUSED, error=text[len(ERROR_PREFIX):])
    try:
        value = json.loads(text)
        kind = ReceiptKind(value.pop("receipt"))
        if kind is ReceiptKind.REFUSED:
            raise ValueError("a refusal comes as an Error: line")
        at = value.pop("at", None)
        return Receipt(kind, str(value.pop("id")), str(value.pop("site", "")), float(at) if at is not None else None,
                       value.pop("state", None), value.pop("error", None), value)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"unexpected receipt answer {text[:200]!r}: {exc}") from None
