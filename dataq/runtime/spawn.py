"""Running a program to its end from the event loop through ``posix_spawn``, without a fork of the daemon.

uvloop, the daemons' loop, starts a subprocess with libuv's ``fork()``: the kernel copies the daemon's page tables
while the event loop stands still (measured here: 3 ms from a bare Python process, 6 ms with 40 MB more in its
heap, 10-14 ms with 80 MB more; a pop daemon holds about 40 MB), and the copy costs CPU in the kernel besides.
``posix_spawn`` is a vfork-like clone in glibc: 0.3-0.4 ms, 80 MB more or not. ``network_move`` starts an rsync
per batch, and per record in a trickle, so the pop daemon starts programs often. :func:`run_to_end` starts one with
``posix_spawnp``, reads its output from non-blocking pipes and sees its end through a pidfd (Linux 5.3), all on the
running loop, whichever it is.

The child leads a session of its own (as ``start_new_session``): cancelling the caller kills the whole session, so
helpers the program forked (rsync's receiver, ssh) end with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from dataclasses import dataclass


def _pidfds_work() -> bool:
    """Whether the kernel gives pidfds (Linux 5.3; a seccomp filter may refuse them), asked once."""
    if not hasattr(os, "posix_spawnp") or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


AVAILABLE = _pidfds_work()
"""Whether this host has what :func:`run_to_end` needs (Linux 5.3 with Python 3.9 or later does)."""
IGNORED_BY_PYTHON = (signal.SIGPIPE, signal.SIGXFSZ)
"""Signals Python ignores at its start, set back to their defaults in the child (as subprocess does)."""
KILL_WAIT = 5.0
"""Seconds a killed child gets to be reaped and to close its output before the caller goes on without it."""
READ_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Finished:
    """How a program ended: its exit status (minus the signal's number if a signal ended it), and its output."""

    returncode: int
    stdout: bytes
    stderr: bytes


async def run_to_end(argv: list[str]) -> Finished:
    """Run ``argv`` (found on ``PATH``, never through a shell; stdin ``/dev/null``) until it has exited and its
    output is closed. OSError if it cannot be started; a cancelled caller kills its session first."""
    out_read, out_write = os.pipe()
    try:
        err_read, err_write = os.pipe()
    except BaseException:
        os.close(out_read)
        os.close(out_write)
        raise
    try:
        # Blocks the loop only while the clone execs (0.3-0.4 ms), the very point of this module.
        pid = os.posix_spawnp(argv[0], argv, os.environ, setsid=True, setsigdef=IGNORED_BY_PYTHON,  # noqa: ASYNC221
                              file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                            (os.POSIX_SPAWN_DUP2, out_write, 1),
                                            (os.POSIX_SPAWN_DUP2, err_write, 2)])
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    try:
        child = _Child(asyncio.get_running_loop(), pid, out_read, err_read)
    except BaseException:
        # Not watched: not left running either (a transfer nobody records), nor a zombie, nor open pipes.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.close(out_read)
        os.close(err_read)
        _reap_later(pid)
        raise
    try:
        await asyncio.shield(child.ended)  # shielded: a cancel must not cancel the future the kill waits on
    except BaseException:
        child.kill()
        try:
            async with asyncio.timeout(KILL_WAIT):
                await asyncio.shield(child.ended)
        except TimeoutError:
            pass
        finally:
            child.abandon()  # also when a second cancel ends the wait
        raise
    assert child.returncode is not None
    return Finished(child.returncode, bytes(child.output[out_read]), bytes(child.output[err_read]))


class _Child:
    """A started child: its output read as it comes, its end seen through its pidfd, ``ended`` once both are
    over."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pid: int, out: int, err: int) -> None:
        self.loop, self.pid = loop, pid
        self.output = {out: bytearray(), err: bytearray()}
        self.returncode: int | None = None
        self.ended: asyncio.Future[None] = loop.create_future()
        self._open: set[int] = set()
        """Descriptors being watched (closed once done with); none are watched before all can be."""
        pidfd = self._pidfd = os.pidfd_open(pid)  # a zombie has one too: a child that already ended is seen to end
        try:
            for fd in (out, err):
                os.set_blocking(fd, False)
                loop.add_reader(fd, self._read, fd)
                self._open.add(fd)
            loop.add_reader(pidfd, self._exited)
            self._open.add(pidfd)
        except BaseException:
            for fd in self._open:
                loop.remove_reader(fd)
            os.close(pidfd)
            raise

    def kill(self) -> None:
        """The whole session: the program's helpers too, which may outlive it holding its output."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)

    def abandon(self) -> None:
        """Stop watching (the caller goes on without the child); one that has not been reaped yet is reaped by a
        thread, so that it does not stay a zombie for the daemon's life."""
        for fd in list(self._open):
            self._close(fd)
        if self.returncode is None:
            _reap_later(self.pid)

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # an error reading a pipe ends it as its close would
        if data:
            self.output[fd] += data
        else:
            self._close(fd)

    def _exited(self) -> None:
        try:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped elsewhere (a waitpid(-1) of another library): its status is gone
            self.returncode = 255
        self._close(self._pidfd)

    def _close(self, fd: int) -> None:
        if fd not in self._open:
            return
        self._open.discard(fd)
        self.loop.remove_reader(fd)
        os.close(fd)
        if not self._open and not self.ended.done():
            self.ended.set_result(None)


def _reap_later(pid: int) -> None:
    """Reap ``pid`` on a thread of its own, whenever it ends."""
    threading.Thread(target=_reap, args=(pid,), name=f"reap {pid}", daemon=True).start()


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
