"""Records: what a feeder sends, what the queue tracks, and every text form they take.

A record names one data file: its absolute ``path``, its ``checksum`` (the record's id: two records with the
same checksum are the same data) and its ``size`` in bytes, plus when and from where it was pushed. This module
is the only place that parses or formats records, so the daemons, the CLI and the tests agree on every form:

* the wire/file text line ``<path> <checksum> <size>`` (the 2014 data-q's form; paths without whitespace);
* the JSON object line ``{"path": ..., "checksum": ..., "size": ...}`` (any path, spaces included; a cascade's
  hand-on adds ``"site"``, the handing site's name: :func:`handon_line`; a feeder adds ``"identity"``, the file
  it hashed: :attr:`Record.identity`);
* the list line ``<checksum> : path=<path>, size=<size>`` that ``dataq-cli --list`` prints;
* the stored value kept in Redis (:mod:`dataq.stored_value`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from dataq.checksum import DEFAULT_ALGORITHM, HEX_DIGITS
from dataq.errors import InvalidRecord
from dataq.file_identity import Identity
from dataq.handshake import Capability
from dataq.keys import ACTIVITY_PATTERN, DEFAULT_ACTIVITY


def pattern_for(algorithm: str) -> str:
    """The checksum pattern of a queue whose records carry ``algorithm``'s checksums: lower-case hex."""
    return rf"[0-9a-f]{{{HEX_DIGITS[algorithm]}}}"


DEFAULT_CHECKSUM_PATTERN = pattern_for(DEFAULT_ALGORITHM)
"""Lower-case hex md5, as the original data-q's feeders send it."""

MAX_PATH_LENGTH = 4096
"""Linux PATH_MAX: a longer path cannot name a file."""

MAX_SIZE = 2**63 - 1
"""Largest file size any filesystem reports (signed 64-bit ``off_t``)."""

JSON_KEYS = frozenset({"path", "checksum", "size"})
SITE_KEY = "site"
"""An optional key of the JSON form: the name of the site that hands the record on (a cascade's hand-on)."""
ALGORITHM_KEY = "algorithm"
"""An optional key of the JSON form: the algorithm of the checksum (a cascade's hand-on names it, so that a site
whose queue uses another is refused, not silently mismatched)."""
IDENTITY_KEY = "identity"
"""An optional key of the JSON form: the identity of the file the feeder hashed (:attr:`Record.identity`)."""
AGAIN_KEY = "again"
"""An optional key of the JSON form: ``true`` for a record sent again on purpose (:attr:`Record.again`)."""
ACTIVITY_KEY = "activity"
"""An optional key of the JSON form: the activity the record is served in (:mod:`dataq.activities`)."""
IDENTITY_FIELDS = 5
OPTIONAL_KEYS = frozenset({SITE_KEY, ALGORITHM_KEY, IDENTITY_KEY, AGAIN_KEY, ACTIVITY_KEY})
SITE_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""A site's name (the setting ``site``)."""
DIGITS = re.compile(r"[0-9]+")
_COMMON_LINE = rf"(/[!-~]{{0,{MAX_PATH_LENGTH - 1}}}) ([!-~]+) ([0-9]{{1,19}})\r?\n?"
_COMMON_LINE_TEXT = re.compile(_COMMON_LINE)
_COMMON_LINE_BYTES = re.compile(_COMMON_LINE.encode())
"""A text-form line of printable ASCII fields joined by single spaces: absolute path of at most MAX_PATH_LENGTH
characters, an id free of whitespace and control characters, a size of digits."""
_WHITESPACE = re.compile(r"\s")
"""Whitespace as ``str.isspace`` has it (Unicode's): a path holding any is sent in the JSON form."""
_CLEAN_ID = re.compile(r"[^\s\x00-\x1f\x7f]+")
"""Ids never hold whitespace or control characters, whatever the configured pattern: they are list entries,
words of the wire's text form, and must never collide with the range scripts' tombstone."""


@dataclass(frozen=True, slots=True)
class Record:
    """One data file the queue tracks. ``checksum`` is the record's id."""

    path: str
    checksum: str
    size: int
    pushed_at: float | None = None
    """Seconds since the epoch when Redis stored the record (None until stored)."""
    source: str | None = None
    """Who pushed it: a feeder's ``host:port``, ``<site>@<host:port>`` for a cascade's hand-on, ``cli``,
    ``load:<file>``... (a parsed hand-on line holds the handing site's name here until it is stored)."""
    identity: Identity | None = None
    """The file its feeder hashed: device, inode, size, modification and change time (ns), sent only for a file
    that had not changed for a second before it was hashed (:mod:`dataq.file_identity`). An action finding the file
    still so may take the checksum as proven without reading the file again (``[queues.NAME] source_check``):
    any write to it, or another file in its place, changes one of them (the change time cannot be set back)."""
    algorithm: str | None = None
    """The algorithm of the checksum, where the record's maker knows it (a feeder's own read): the line that
    carries the identity names it, so that a queue of another algorithm refuses it instead of taking a checksum
    nobody checked as proven."""
    again: bool = False
    """Sent again on purpose (``dataq-cli --again``, an audit's repair): stored even if the queue remembers the id
    done, and handed on marked so, so that every site of a cascade moves the file again."""
    activity: str | None = None
    """The activity its feeder or the site before named (None: none named; :mod:`dataq.activities` then assigns
    one by the path); as stored, the activity it is queued in (None: ``default``)."""

    @property
    def id(self) -> str:
        return self.checksum


@dataclass(frozen=True, slots=True)
class RecordRules:
    """How record fields are validated: the queue's checksum algorithm and the pattern its checksums match."""

    checksum_pattern: str = DEFAULT_CHECKSUM_PATTERN
    algorithm: str = DEFAULT_ALGORITHM
    """The queue's checksum algorithm (``[queues.NAME] checksum``): what its feeders compute."""
    activities: frozenset[str] | None = frozenset({DEFAULT_ACTIVITY})
    """The activities the queue defines (``default`` always): a feeder may name only these. None takes any name
    (:meth:`naming_any_activity`)."""
    compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            compiled = re.compile(self.checksum_pattern)
        except re.error as exc:
            raise InvalidRecord(f"checksum pattern {self.checksum_pattern!r} is not a valid regex: {exc}") from exc
        object.__setattr__(self, "compiled", compiled)

    def check_checksum(self, checksum: str) -> str:
        # One precompiled pattern in the common case; the per-character look only to explain a refusal.
        if _CLEAN_ID.fullmatch(checksum) is None:
            if not checksum:
                raise InvalidRecord("checksum is empty")
            raise InvalidRecord(f"checksum {checksum!r} contains whitespace or a control character")
        if self.compiled.fullmatch(checksum) is None:
            raise InvalidRecord(f"checksum {checksum!r} does not match the pattern {self.checksum_pattern!r} of "
                                f"this queue's {self.algorithm} checksums")
        return checksum

    def check_activity(self, activity: str, site: str | None) -> str | None:
        """The activity a record line named, if the queue defines it. A feeder's line naming another is refused;
        a site's hand-on keeps it only if this queue defines it too (else None: this queue's own globs decide), so
        that a cascade whose sites define different activities still moves every record."""
        if self.activities is None or activity in self.activities:
            return activity
        if site is not None:
            return None
        raise InvalidRecord(f"unknown activity {_shortened(activity)!r}; this queue's activities are: "
                            f"{', '.join(sorted(self.activities or ()))}")

    def naming_any_activity(self) -> RecordRules:
        """These rules, taking a line that names any activity: for lines whose activity is then replaced (``--load
        --activity``: a dump of another queue's activities is loaded into one of this queue's)."""
        return RecordRules(self.checksum_pattern, self.algorithm, None)

    def check_algorithm(self, algorithm: object) -> None:
        """A record that names its checksum's algorithm must name the queue's."""
        if algorithm != self.algorithm:
            shown = algorithm if isinstance(algorithm, str) else json.dumps(algorithm)
            raise InvalidRecord(f"checksum algorithm {_shortened(shown)!r} is not this queue's: its checksums are "
                                f"{self.algorithm}")


DEFAULT_RULES = RecordRules()


def check_path(path: str) -> str:
    if not path:
        raise InvalidRecord("path is empty")
    if not path.startswith("/"):
        raise InvalidRecord(f"path {path!r} is not absolute (it must start with '/')")
    if "\0" in path or "\n" in path or "\r" in path:
        raise InvalidRecord("path contains a NUL, newline or carriage return")
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidRecord(f"path is {len(path)} characters long; at most {MAX_PATH_LENGTH} are allowed")
    return path


def check_identity(identity: object, size: int) -> Identity:
    """A record's file identity (:attr:`Record.identity`) from its JSON form: five integers, 0 or more, the third
    the record's size."""
    if not isinstance(identity, list) or len(identity) != IDENTITY_FIELDS or any(
            isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < 2**64 for item in identity):
        raise InvalidRecord(f"identity {_shortened(json.dumps(identity), 120)} is not a list of "
                            f"{IDENTITY_FIELDS} integers (device, inode, size, mtime and ctime in ns), 0 or more")
    if identity[2] != size:
        raise InvalidRecord(f"identity says {identity[2]} bytes; the record says {size}")
    return as_identity(identity)


def as_identity(fields: list[int]) -> Identity:
    """Five integers (checked by the caller) as an identity."""
    device, inode, size, mtime_ns, ctime_ns = fields
    return device, inode, size, mtime_ns, ctime_ns


def check_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int):
        raise InvalidRecord(f"size {size!r} is not an integer")
    if size < 0:
        raise InvalidRecord(f"size {size} is negative")
    if size > MAX_SIZE:
        raise InvalidRecord(f"size {size} is larger than {MAX_SIZE}")
    return size


def _parse_size_text(text: str) -> int:
    if DIGITS.fullmatch(text) is None:
        if text.startswith("-") and DIGITS.fullmatch(text[1:]):
            raise InvalidRecord(f"size {_shortened(text)} is negative")
        raise InvalidRecord(f"size {_shortened(text)!r} is not a non-negative integer")
    if len(text.lstrip("0")) > len(str(MAX_SIZE)):
        # Before int(): Python refuses to convert more than 4,300 digits, with a ValueError, not InvalidRecord.
        raise InvalidRecord(f"size {_shortened(text)} is larger than {MAX_SIZE}")
    return check_size(int(text))


def _shortened(text: str, keep: int = 40) -> str:
    """``text`` cut for an error reply: a line may be 64 KiB long."""
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} characters)"


def make_record(path: str, checksum: str, size: int, rules: RecordRules = DEFAULT_RULES,
                identity: Identity | None = None) -> Record:
    """Build a validated record from typed fields (raises InvalidRecord); with the file's ``identity``, the
    record also names ``rules``' algorithm (the feeder computed it)."""
    return Record(
        path=check_path(path),
        checksum=rules.check_checksum(checksum),
        size=check_size(size),
        identity=identity,
        algorithm=rules.algorithm if identity is not None else None,
    )


def parse_line(line: str | bytes, rules: RecordRules = DEFAULT_RULES) -> Record:
    """Parse one record line in either wire form; the line may still carry its ``\\n`` or ``\\r\\n``.

    Raises InvalidRecord naming the field and what is wrong with it.
    """
    # The common line in one match: the push daemon parses every record, and the field-by-field checks below
    # took most of its CPU. A line the pattern takes is one those checks accept alike; any other line, valid or
    # not, goes through them (they also explain refusals).
    if isinstance(line, bytes):
        common_bytes = _COMMON_LINE_BYTES.fullmatch(line)
        if common_bytes is not None:
            path_bytes, checksum_bytes, digits = common_bytes.groups()
            checksum = checksum_bytes.decode()
            size = int(digits)
            if size <= MAX_SIZE and rules.compiled.fullmatch(checksum) is not None:
                return Record(path=path_bytes.decode(), checksum=checksum, size=size)
    else:
        common_text = _COMMON_LINE_TEXT.fullmatch(line)
        if common_text is not None:
            path, checksum, digits_text = common_text.groups()
            size = int(digits_text)
            if size <= MAX_SIZE and rules.compiled.fullmatch(checksum) is not None:
                return Record(path=path, checksum=checksum, size=size)
    return _parse_line_fully(line, rules)


def _parse_line_fully(line: str | bytes, rules: RecordRules) -> Record:
    if isinstance(line, bytes):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRecord(
                f"line is not valid UTF-8 (byte 0x{line[exc.start]:02x} at offset {exc.start})"
            ) from exc
    else:
        text = line
    text = text.rstrip("\r\n")
    stripped = text.strip()
    if not stripped:
        raise InvalidRecord("empty line; expected '<path> <checksum> <size>' or a JSON object")
    if stripped.startswith("{"):
        return _parse_json(stripped, rules)
    fields = stripped.split()
    if len(fields) != 3:
        raise InvalidRecord(
            f"expected 3 fields '<path> <checksum> <size>', got {len(fields)}"
            + ("; use the JSON form for a path with spaces" if len(fields) > 3 else "")
        )
    path, checksum, size_text = fields
    return Record(
        path=check_path(path),
        checksum=rules.check_checksum(checksum),
        size=_parse_size_text(size_text),
    )


def _parse_json(text: str, rules: RecordRules) -> Record:
    try:
        obj: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: a JSON syntax error, or a number of 4,300+ digits
        raise InvalidRecord(f"invalid JSON: {_shortened(str(exc), 120)}") from exc
    if not isinstance(obj, dict):
        raise InvalidRecord("JSON record must be an object")
    unknown = sorted(set(obj) - JSON_KEYS - OPTIONAL_KEYS)
    if unknown:
        raise InvalidRecord(f"unknown JSON key {unknown[0]!r}; expected only {sorted(JSON_KEYS)} "
                            f"(and {' and '.join(map(repr, sorted(OPTIONAL_KEYS)))})")
    missing = sorted(JSON_KEYS - set(obj))
    if missing:
        raise InvalidRecord(f"JSON record lacks the key {missing[0]!r}")
    path, checksum, site = obj["path"], obj["checksum"], obj.get(SITE_KEY)
    if not isinstance(path, str):
        raise InvalidRecord(f"path {path!r} is not a string")
    if not isinstance(checksum, str):
        raise InvalidRecord(f"checksum {checksum!r} is not a string")
    if site is not None and (not isinstance(site, str) or SITE_PATTERN.fullmatch(site) is None):
        raise InvalidRecord(f"site {_shortened(json.dumps(site), 80)} is not a site name (1 to 64 letters, digits, "
                            "_, -, . or :)")
    if ALGORITHM_KEY in obj:
        rules.check_algorithm(obj[ALGORITHM_KEY])
    elif site is not None:
        # A hand-on from a site older than algorithm names: its records are md5 (xxh128's look the same).
        rules.check_algorithm(DEFAULT_ALGORITHM)
    again = obj.get(AGAIN_KEY, False)
    if not isinstance(again, bool):
        raise InvalidRecord(f"again {_shortened(json.dumps(again), 40)} is not true or false")
    activity = obj.get(ACTIVITY_KEY)
    if activity is not None and (not isinstance(activity, str) or ACTIVITY_PATTERN.fullmatch(activity) is None):
        raise InvalidRecord(f"activity {_shortened(json.dumps(activity), 60)} is not an activity name (1 to 32 "
                            "letters, digits, _, - or .)")
    if activity is not None:
        activity = rules.check_activity(activity, site)
    record = make_record(path, checksum, obj["size"], rules)
    identity = check_identity(obj[IDENTITY_KEY], record.size) if obj.get(IDENTITY_KEY) is not None else None
    if identity is not None and ALGORITHM_KEY not in obj:
        raise InvalidRecord("identity needs the key 'algorithm': the algorithm of the checksum it proves")
    if site is None and identity is None and not again and activity is None:
        return record
    return Record(record.path, record.checksum, record.size, source=site, identity=identity, again=again,
                  activity=activity)


def format_line(record: Record, *, with_identity: bool = False) -> str:
    """The line a feeder would send for this record (text form unless the path holds whitespace or the record is
    sent :attr:`~Record.again`); with
    ``with_identity``, the JSON form with the record's file identity and algorithm, if it has them (a feeder's own
    read)."""
    marks: dict[str, object] = {AGAIN_KEY: True} if record.again else {}
    if record.activity is not None:
        marks[ACTIVITY_KEY] = record.activity
    if with_identity and record.identity is not None and record.algorithm is not None:
        return json.dumps({"path": record.path, "checksum": record.checksum, "size": record.size,
                           ALGORITHM_KEY: record.algorithm, IDENTITY_KEY: list(record.identity), **marks})
    if marks or _WHITESPACE.search(record.path) is not None:  # a scan, not a Python step per character
        return json.dumps({"path": record.path, "checksum": record.checksum, "size": record.size, **marks})
    return f"{record.path} {record.checksum} {record.size}"


def handon_line(record: Record, site: str, algorithm: str = DEFAULT_ALGORITHM) -> str:
    """The JSON line a site hands ``record`` on with, naming itself and its checksum's algorithm (a next site that
    does not speak these names gets :func:`form_for` of it)."""
    named: dict[str, object] = {"path": record.path, "checksum": record.checksum, "size": record.size}
    if site:
        named[SITE_KEY] = site
    if record.again:
        named[AGAIN_KEY] = True
    if record.activity is not None and record.activity != DEFAULT_ACTIVITY:
        # The next site serves it in the same activity, if it defines one of that name.
        named[ACTIVITY_KEY] = record.activity
    return json.dumps({**named, ALGORITHM_KEY: algorithm})


def form_for(line: bytes, speaks: frozenset[Capability]) -> bytes:
    """``line`` (a record line, with its newline) in the form a peer that speaks only ``speaks`` takes (the
    handshake's :attr:`~dataq.handshake.Greeting.capabilities`): the names it does not speak taken out, and with
    none left, the 2014 text form (the JSON form for a path holding whitespace). Without its identity the actions
    read the file again; without its site the record is stored as from the handing host alone.

    A record whose checksum is not md5 keeps its algorithm: a peer that does not speak algorithms knows md5 only,
    and must refuse such a record, never take it as md5. A line that is not a JSON record goes as it is."""
    if not line.startswith(b"{"):
        return line
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if not isinstance(obj, dict) or not isinstance(obj.get("path"), str) or not isinstance(obj.get("checksum"), str) \
            or type(obj.get("size")) is not int:
        return line  # not a record: sent as it is, for the daemon to refuse saying why
    drop = {key for key in OPTIONAL_KEYS.intersection(obj) if Capability(key) not in speaks}
    if not drop:
        return line
    if ALGORITHM_KEY in drop:
        if obj[ALGORITHM_KEY] != DEFAULT_ALGORITHM:
            drop.discard(ALGORITHM_KEY)
        elif IDENTITY_KEY in obj:
            drop.add(IDENTITY_KEY)  # an identity is read only with the algorithm of the checksum it proves
    for key in drop:
        del obj[key]
    if not OPTIONAL_KEYS.intersection(obj):
        record = Record(obj["path"], obj["checksum"], obj["size"])
        return (format_line(record) + "\n").encode("utf-8", "surrogateescape")
    return (json.dumps(obj) + "\n").encode("utf-8", "surrogateescape")


def format_list_line(record: Record) -> str:
    """The ``dataq-cli --list`` line: ``<checksum> : path=<path>, size=<size>``, then ``, activity=<name>`` for a
    record of a queue with activities (the 2014 line, extended at its end)."""
    line = f"{record.checksum} : path={record.path}, size={record.size}"
    return line if record.activity is None else f"{line}, activity={record.activity}"
