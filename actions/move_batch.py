"""Sending and verifying one batch of ``network_move`` (its module docstring says what counts as verified): one
rsync sends the batch's files, from their own directory when they lie there at their layout paths already, else
from a tree of symlinks laid out as the destination will be; one dry-run fetch has the destination report the
digests of the files it must check."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dataq.errors import ActionError
from dataq.file_identity import identity_of
from dataq.record import Record

from .files import SourceMismatch, SourceRead
from .move_options import NetworkMoveOptions
from .rsync import RSYNC_PARTIAL, Completed, RunCommand, remote_digests, send, write_list


class Mover(Protocol):
    """What a batch needs of its action."""

    options: NetworkMoveOptions
    remote: str
    """The algorithm of the digests the destination reports."""

    def base_args(self) -> list[str]: ...

    async def connect(self, argv: list[str], ids: Sequence[str] = ()) -> Completed:
        """Run an rsync call to the destination for the records ``ids`` (no more at once than it takes)."""

    def target(self, move: Move) -> str: ...


@dataclass(frozen=True, slots=True)
class Move:
    """One record of a batch: its file's path beneath the destination, and what reading its source found (None:
    the source is gone, only the destination is checked)."""

    record: Record
    relative: str
    source: SourceRead | None

    @property
    def digest(self) -> str:
        """The digest the destination's file must have, in the algorithm rsync reports (``remote_algorithm``)."""
        return self.source.digest if self.source is not None else self.record.checksum.lower()


def common_root(moves: list[Move]) -> str | None:
    """The directory beneath which every move's source is at its layout path (``ROOT/relative``), if they share
    one; None otherwise."""
    roots = set()
    for move in moves:
        path = os.path.abspath(move.record.path)
        if not path.endswith(f"/{move.relative}"):
            return None
        roots.add(path[:len(path) - len(move.relative)])
    return roots.pop() if len(roots) == 1 else None


class BatchMove:
    """Sending and verifying one batch (see the module docstring); fills ``outcomes`` for the records that fail."""

    def __init__(self, action: Mover, moves: list[Move], outcomes: list[ActionError | None],
                 work: str) -> None:
        self.action, self.options, self.moves, self.outcomes, self.work = action, action.options, moves, outcomes, work
        self.sent: Completed | None = None
        self.fetched: Completed | None = None
        self.found: dict[str, str] = {}
        """The digest of each file the destination reported, by its path there."""

    def _connect(self, moves: list[Move]) -> RunCommand:
        """The action's rsync calls, each naming the records it is for (a call waiting for a connection is then
        named in the heartbeat: ``dataq-cli --why`` says which records a ``max_connections`` holds)."""
        ids = [move.record.id for move in moves]
        return lambda argv: self.action.connect(argv, ids)

    def _open(self) -> list[int]:
        return [index for index, outcome in enumerate(self.outcomes) if outcome is None]

    async def run(self) -> None:
        options = self.options
        present = [index for index in self._open() if self.moves[index].source is not None]
        # Without verify every file is sent: rsync's end-to-end check then covers each of them.
        transferred = await self._send(present, ignore_times=not options.verify) if present else set()
        if self._failed_all():
            return
        # A file rsync did not transfer (already there, or rsync failed on it) is checked where it is; with
        # reread, so is every file.
        check = [index for index in self._open()
                 if options.reread or self.moves[index].relative not in transferred]
        if not options.verify and self.sent is not None and self.sent.status == 0:
            check = [index for index in check if self.moves[index].source is None]
        wrong = await self._verify(check)
        retry = [index for index in wrong if self.moves[index].source is not None]
        if retry and options.verify and self.sent is not None and self.sent.status == 0:
            # The destination may hold other data of the same size and time, which the quick check skipped.
            transferred = await self._send(retry, ignore_times=True)
            if self._failed_all():
                return
            wrong = set(wrong) - set(retry) | await self._verify(
                [index for index in retry if options.reread or self.moves[index].relative not in transferred])
        for index in wrong:
            self.outcomes[index] = self._not_there(self.moves[index])

    async def _send(self, indices: list[int], *, ignore_times: bool) -> set[str]:
        """Send the files of ``indices``; their names that rsync transferred and whose source did not change."""
        listing = os.path.join(self.work, "send")
        moves = [self.moves[index] for index in indices]
        # Sources that already lie at their layout paths beneath one directory (the default layout, files of one
        # directory) are sent from there; others from a tree of symlinks laid out as the destination will be.
        staged = os.path.join(self.work, "tree")
        tree = common_root(moves) or staged

        def stage() -> None:
            if tree == staged:
                shutil.rmtree(tree, ignore_errors=True)
                for move in moves:
                    link = os.path.join(tree, move.relative)
                    os.makedirs(os.path.dirname(link), exist_ok=True)
                    if not os.path.lexists(link):  # the same data twice in a batch is sent once
                        os.symlink(os.path.abspath(move.record.path), link)
            write_list(listing, sorted({move.relative for move in moves}))

        await asyncio.to_thread(stage)
        transferred, self.sent = await send(self.action.base_args(), tree, listing, self.options.destination,
                                            mkpath=self.options.create_dirs, ignore_times=ignore_times,
                                            run=self._connect(moves))
        changed = await asyncio.to_thread(self._changed, [move for move in moves if move.relative in transferred])
        for index, move in zip(indices, moves, strict=True):
            if move.record.path in changed:
                self.outcomes[index] = ActionError(f"source file {move.record.path} changed while it was sent to "
                                                   f"{self.action.target(move)}")
        return transferred

    @staticmethod
    def _changed(moves: list[Move]) -> set[str]:
        """Sources that are no longer the file dataq read (rsync sent what it read, which may then differ)."""
        changed = set()
        for move in moves:
            assert move.source is not None
            try:
                if identity_of(os.stat(move.record.path)) != move.source.identity:
                    changed.add(move.record.path)
            except OSError:
                changed.add(move.record.path)
        return changed

    def _failed_all(self) -> bool:
        """After a send: if rsync could not reach the destination or did not run, every open record fails."""
        sent = self.sent
        if sent is None or sent.status == 0 or (sent.status in RSYNC_PARTIAL and not sent.unreachable):
            return False
        for index in self._open():
            move = self.moves[index]
            self.outcomes[index] = sent.failure(self._what(move), self.options.destination, move.relative)
        return True

    async def _verify(self, indices: list[int]) -> set[int]:
        """Have the destination report the digest of each file of ``indices``; those that are not what they must be."""
        if not indices:
            return set()
        scratch, listing = os.path.join(self.work, "scratch"), os.path.join(self.work, "verify")
        relatives = sorted({self.moves[index].relative for index in indices})

        def prepare() -> None:
            os.makedirs(scratch, exist_ok=True)
            write_list(listing, relatives)

        await asyncio.to_thread(prepare)
        found, self.fetched = await remote_digests(self.action.base_args(), listing, self.options.destination,
                                                   scratch, self.action.remote,
                                                   run=self._connect([self.moves[index] for index in indices]))
        if self.fetched.unreachable:
            for index in indices:
                self.outcomes[index] = self.fetched.failure(
                    f"verification of {self.action.target(self.moves[index])}", self.options.destination)
            return set()
        self.found.update(found)
        return {index for index in indices if found.get(self.moves[index].relative) != self.moves[index].digest}

    def _what(self, move: Move) -> str:
        return f"rsync of {move.record.path} to {self.action.target(move)}"

    def _not_there(self, move: Move) -> ActionError:
        record, target, sent, fetched = move.record, self.action.target(move), self.sent, self.fetched
        assert fetched is not None
        reported = self.found.get(move.relative)
        if move.source is None:
            if reported is None:
                return SourceMismatch(fetched.describe(f"source file {record.path} does not exist; checking {target}",
                                                       move.relative))
            return SourceMismatch(f"source file {record.path} does not exist and {target} holds other data "
                                  f"(checksum {reported or '(none)'})")
        if sent is not None and sent.status != 0 and move.relative in sent.stderr:
            return sent.failure(self._what(move), self.options.destination, move.relative)
        if reported is None:
            problem = sent.describe(self._what(move), move.relative) if sent is not None and sent.status else \
                fetched.describe(f"verification of {target}", move.relative)
            return ActionError(f"{target} is not at the destination after the transfer: {problem}")
        return ActionError(f"verification of {target} failed: the destination differs from the source "
                           f"(checksum {reported or '(none)'}, the record's data has {move.digest})")
