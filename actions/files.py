"""File helpers the storage and transfer actions share: reading a source against its record, and removing sources
durably (the verified atomic store is in :mod:`.storing`, path templates in :mod:`.layout`).

Everything that reads or writes file data runs in a worker thread (``asyncio.to_thread``) so a large file never
stalls the pop daemon's event loop; a cancelled caller (an action timeout, shutdown) sets an abort flag that the
thread checks between chunks, so it stops soon instead of finishing unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from dataq.checksum import DEFAULT_ALGORITHM, hash_fd_many
from dataq.durable import sync_directory
from dataq.errors import ActionError, Permanent
from dataq.file_identity import Identity, identity_of
from dataq.logs import get_logger
from dataq.record import Record

T = TypeVar("T")

log = get_logger()


class SourceMismatch(Permanent):
    """The source file is missing or its size or checksum differs from its record."""


class CopyMismatch(Permanent):
    """The copy read back differs from the record (bad disk, memory or network); nothing was published."""


class StorageConflict(Permanent):
    """The target name already holds different data; it is left alone for an operator to look at."""


# --- checksums ----------------------------------------------------------------------------------------------


async def in_thread(func: Callable[[threading.Event], T]) -> T:
    """Run ``func(abort)`` in a worker thread; if the caller is cancelled, set ``abort`` so the thread stops too."""
    abort = threading.Event()
    try:
        return await asyncio.to_thread(func, abort)
    except asyncio.CancelledError:
        abort.set()
        raise


async def finish_in_thread(func: Callable[..., T], /, *args: object) -> T:
    """Run ``func(*args)`` in a worker thread and wait for its end even when the caller is cancelled (then the
    cancellation goes on): work done under a lease must not outlive the lease, as a thread left running would."""
    work = asyncio.ensure_future(asyncio.to_thread(func, *args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([work])
        if not work.cancelled() and work.exception() is not None:  # nobody is left to raise it to
            log.warning("work finished after its caller was cancelled, and failed", work=getattr(func, "__name__", ""),
                        error=str(work.exception()))
        raise


def matches(digest: str, record: Record) -> bool:
    # Hex is case-insensitive; a queue's checksum pattern may allow upper case.
    return digest.lower() == record.checksum.lower()


def check_source_sync(record: Record, algorithm: str, abort: threading.Event | None = None, *,
                      trust_identity: bool = False) -> None:
    """Raise SourceMismatch unless the record's file exists with the record's size and checksum."""
    read_source_sync(record, algorithm, abort, also=None, trust_identity=trust_identity)


@dataclass(frozen=True, slots=True)
class SourceRead:
    """What checking a source against its record found: its digest in the algorithm the destination can report
    of a copy (rsync's: md5 or xxh128), and the identity of the file, to tell later whether it was changed
    since."""

    digest: str
    identity: Identity


def unchanged_since_fed(record: Record, info: os.stat_result) -> bool:
    """Whether the file ``info`` describes is the one the record's feeder hashed, unchanged since
    (:attr:`Record.identity`): its checksum is then proven without reading it."""
    return record.identity is not None and identity_of(info) == record.identity


def read_source_sync(record: Record, algorithm: str, abort: threading.Event | None = None, *,
                     also: str | None = DEFAULT_ALGORITHM, trust_identity: bool = False) -> SourceRead:
    """Check the record's file as :func:`check_source_sync` does; its digest in ``also`` is computed in the same
    read when that is not the record's algorithm (``""`` with ``also=None``). With ``trust_identity``, a file
    :func:`unchanged_since_fed` is not read when ``also`` asks for no other digest."""
    algorithms = (algorithm,) if also is None or also == algorithm else (algorithm, also)
    try:
        # Opened, not only looked up: on NFS the open revalidates the file's attributes (close-to-open), a stat
        # may answer from the client's cache.
        fd = os.open(record.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise SourceMismatch(f"source file {record.path} does not exist") from exc
    except OSError as exc:
        raise SourceMismatch(f"cannot read source file {record.path}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if info.st_size != record.size:
            raise SourceMismatch(f"source file {record.path} has {info.st_size} bytes; its record says {record.size}")
        if trust_identity and len(algorithms) == 1 and unchanged_since_fed(record, info):
            return SourceRead(record.checksum.lower() if also is not None else "", identity_of(info))
        digests, read = hash_fd_many(fd, algorithms, abort)
    except OSError as exc:
        raise SourceMismatch(f"cannot read source file {record.path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    check_read(record, digests[0], read)
    return SourceRead(digests[-1].lower() if also is not None else "", identity_of(info))


def check_read(record: Record, digest: str, read: int) -> None:
    if read != record.size:
        raise SourceMismatch(f"source file {record.path} changed while read: {read} bytes, record says {record.size}")
    if not matches(digest, record):
        raise SourceMismatch(f"source file {record.path} has checksum {digest}; its record says {record.checksum}")


def remove_source_sync(path: str) -> None:
    """Delete the source file and make that durable; a file already gone is fine (a retried record)."""
    (error,) = remove_sources_sync([path])
    if error is not None:
        raise error


def remove_sources_sync(paths: Sequence[str]) -> list[ActionError | None]:
    """Delete source files, then sync each of their directories once; per path None or what failed."""
    errors: list[ActionError | None] = [None] * len(paths)
    removed: dict[str, list[int]] = {}
    for index, path in enumerate(paths):
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            errors[index] = ActionError(f"cannot remove source file {path}: {exc.strerror or exc}")
            continue
        removed.setdefault(os.path.dirname(path), []).append(index)
    for directory, indices in removed.items():
        try:
            sync_directory(directory)
        except OSError as exc:
            for index in indices:
                errors[index] = ActionError(f"removed source file {paths[index]}, but cannot sync its directory: "
                                            f"{exc.strerror}")
    return errors


