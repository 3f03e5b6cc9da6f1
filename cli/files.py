"""Files of records: ``--dump`` and ``--load`` stream them, ``--pushfile`` turns a data file into a record.

Both directions hold one batch of records at a time, so a queue of millions of records dumps and loads in
constant memory. Record lines are read and written only through :mod:`dataq.record`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

import click

from dataq.checksum import hash_file
from dataq.errors import DataqError, InvalidRecord
from dataq.record import Record, RecordRules, format_line, make_record, parse_line
from dataq.store import QueueList, QueueStore

LOAD_BATCH = 1000
"""Records pushed per group commit by --load (the push daemon's default batch)."""
MAX_DUPLICATE_WARNINGS = 100
"""Duplicates named one by one by --load; the rest are only counted, so a re-load does not flood stderr."""
STDIN = "-"
DUMP_FILE_MODE = 0o666
"""Mode of a dump file before the umask, as for any file a program creates."""


class FileProblem(DataqError):
    """A file given to --dump, --load or --pushfile cannot be read or written, or holds a malformed record."""


class Progress(Protocol):
    def update(self, n_steps: int) -> None: ...


class _NoProgress:
    def update(self, n_steps: int) -> None:
        pass


@contextlib.contextmanager
def progress_bar(enabled: bool, length: int | None, label: str) -> Iterator[Progress]:
    """A progress bar on stderr when ``enabled`` (a TTY, not --json) and the length is known."""
    if not enabled or not length:
        yield _NoProgress()
        return
    with click.progressbar(length=length, label=label, file=sys.stderr) as bar:
        yield bar


class Terminal(Protocol):
    def isatty(self) -> bool: ...


def show_progress(as_json: bool, stdout: Terminal | None = None, stderr: Terminal | None = None) -> bool:
    """Progress bars only for a person watching a terminal: never with --json or when output is piped."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    return not as_json and out.isatty() and err.isatty()


def file_record(path: str, rules: RecordRules) -> Record:
    """The record of a data file: its absolute path, checksum (the queue's algorithm) and size, read in chunks."""
    absolute = os.path.abspath(path)
    try:
        checksum, size = hash_file(absolute, rules.algorithm)
    except OSError as exc:
        raise FileProblem(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return make_record(absolute, checksum, size, rules)
    except InvalidRecord as exc:
        raise FileProblem(f"{path}: {exc}") from exc


@dataclass
class LoadOutcome:
    loaded: int = 0
    duplicates: int = 0


async def load(
    store: QueueStore,
    path: str,
    rules: RecordRules,
    *,
    warn: Callable[[str], None],
    progress: bool,
    again: bool = False,
    activity: str | None = None,
) -> LoadOutcome:
    """Push every record line of ``path`` (``-``: stdin) in file order, ``LOAD_BATCH`` records per commit.

    Blank lines are skipped; with ``again`` every record is pushed even if the queue remembers it done (as a line
    that says ``"again": true`` is); with ``activity`` every record is queued in it, whatever its line names. A
    malformed line stops the load with a FileProblem naming the file and line; the batches before it stay loaded,
    since Redis has acknowledged them.
    """
    outcome = LoadOutcome()
    # With --activity, a line's own activity is replaced: one this queue lacks does not stop the load.
    taken = rules if activity is None else rules.naming_any_activity()
    source = f"load:{'stdin' if path == STDIN else os.path.basename(path)}"
    batch: list[Record] = []

    async def flush() -> None:
        result = await store.push_batch(batch, source=source)
        for record, stored in zip(batch, result.pushed, strict=True):
            if stored:
                outcome.loaded += 1
                continue
            outcome.duplicates += 1
            if outcome.duplicates <= MAX_DUPLICATE_WARNINGS:
                warn(f"ignored duplicate ID={record.checksum}")
        batch.clear()

    try:
        # Blocking file I/O is fine here: the CLI runs nothing else concurrently.
        file = sys.stdin.buffer if path == STDIN else open(path, "rb")  # noqa: ASYNC230, SIM115
    except OSError as exc:
        raise FileProblem(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        length = None if path == STDIN else os.fstat(file.fileno()).st_size
        with progress_bar(progress, length, "Loading") as bar:
            for number, line in enumerate(file, start=1):
                bar.update(len(line))
                if not line.strip():
                    continue
                try:
                    record = parse_line(line, taken)
                    if activity is not None:
                        record = replace(record, activity=activity)
                    batch.append(replace(record, again=True) if again and not record.again else record)
                except InvalidRecord as exc:
                    await flush()
                    ignored = f" ({outcome.duplicates} duplicates ignored)" if outcome.duplicates else ""
                    raise FileProblem(
                        f"{path} line {number}: {exc}; {outcome.loaded} records loaded before it{ignored}"
                    ) from exc
                if len(batch) >= LOAD_BATCH:
                    await flush()
            if batch:
                await flush()
    except OSError as exc:
        raise FileProblem(f"cannot read {path}: {exc.strerror or exc}") from exc
    finally:
        if path != STDIN:
            file.close()
    if outcome.duplicates > MAX_DUPLICATE_WARNINGS:
        warn(f"{outcome.duplicates - MAX_DUPLICATE_WARNINGS} more duplicates not named")
    return outcome


async def dump(store: QueueStore, which: QueueList | None, path: str, *, length: int, progress: bool) -> int:
    """Write the list's records (``which`` None: every tracked record) to ``path`` as record lines, oldest first:
    for the active list that is run order, so ``--load`` of the file (first line first) queues them as they were.

    The file appears complete or not at all: it is written beside its final name and renamed into place.
    """
    directory = os.path.dirname(os.path.abspath(path))  # noqa: ASYNC240 - nothing else runs meanwhile
    try:
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as exc:
        raise FileProblem(f"cannot write {path}: {exc.strerror or exc}") from exc
    count = 0
    try:
        # mkstemp makes the file private; give it the mode any new file of this user gets.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, DUMP_FILE_MODE & ~umask)
        with open(fd, "w", encoding="utf-8") as file, progress_bar(progress, length, "Dumping") as bar:  # noqa: ASYNC230
            async for record in store.iter_records(which, oldest_first=True):
                file.write(format_line(record) + "\n")
                count += 1
                bar.update(1)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise FileProblem(f"cannot write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return count
