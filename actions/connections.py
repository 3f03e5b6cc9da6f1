"""The rsync connections one ``network_move`` opens to its destination at once: up to four, fewer while the far
side refuses more; with a ``bandwidth``, each takes its share of it (the limit over the calls at once).

An rsync daemon may cap a module's connections (``max connections``; 0, unlimited, by default) and refuses one
past the cap ("@ERROR: max connections (N) reached -- try again later", exit status 5). While another connection of
the same action is open (or has just ended), such a refusal says that this action fills the daemon's room itself,
not that the destination is away: the call waits for one of the action's own connections to end and runs again,
and the action opens no more at once than it had open when it was refused (one at least). After
:data:`PROBE_AFTER` times as many calls as it opens at once have gone through, it tries one more at once, up to the
most: it finds the daemon's cap, and finds it again once the cap is raised. A refusal while none of its own
connections is open or has just ended (others hold the daemon's room, or it is stuck) goes back to the caller, an
outage of the destination as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from dataq.logs import get_logger
from dataq.ops.documents import HELD_BACK_KEY, OPEN_KEY

from .rsync import Completed, RunCommand, run_command
from .slots import Slots

log = get_logger()

PROBE_AFTER = 8
"""Calls through per connection at once before one more is tried: a daemon held at its cap then refuses about one
call in eight times the connections open (a refused call costs a connection and its greeting, a few ms)."""
REFUSED_PAUSE = 0.05
"""Seconds a refused call waits, once one of the action's connections has ended, before it connects again."""
LINGER = 1.0
"""Seconds after one of the action's calls ended during which a refusal still counts as the action's own doing: the
daemon's process of that connection frees its room (a lock in its lock file) only as it exits, after the client
has seen the end (measured: a call alone, just after another ended, refused)."""


class Connections:
    """Runs rsync calls, no more at once than the destination takes (see the module docstring)."""

    def __init__(self, destination: str, most: int, run: RunCommand = run_command, *,
                 pause: float = REFUSED_PAUSE, limit: Callable[[], int | None] | None = None) -> None:
        """``limit``: the bytes per second all calls together may take now (None: no limit), split over the calls
        open at once at most (rsync's ``--bwlimit``)."""
        self.destination = destination
        self._limit = limit
        self.most = most
        self._slots = Slots(destination, most)
        """The calls open, and room for :attr:`at_once` of them."""
        self._run, self._pause = run, pause
        self._ended_at = float("-inf")
        """When the last call that went through ended (the loop's clock)."""
        self._through = 0
        """Calls through since :attr:`at_once` last changed."""

    @property
    def at_once(self) -> int:
        """Calls that may run at once now."""
        return self._slots.room

    @at_once.setter
    def at_once(self, calls: int) -> None:
        self._slots.room = calls

    def status(self) -> dict[str, object]:
        """For the heartbeat: the calls open now and the most (the console shows them); the calls at once and the
        most, while the daemon holds them below the most; the records waiting for a connection, while some do."""
        status: dict[str, object] = {OPEN_KEY: {self.destination: {"open": self._slots.open, "most": self.most}},
                                     **self._slots.status(self.at_once)}
        if self.at_once < self.most:
            status[HELD_BACK_KEY] = {self.destination: {"at_once": self.at_once, "most": self.most}}
        return status

    async def run(self, argv: list[str], ids: Sequence[str] = ()) -> Completed:
        """Run ``argv`` (a call for the records ``ids``) once there is room; again, after a pause, each time the
        daemon refuses it while another call of this action is open or has just ended."""
        slots = self._slots
        while True:
            await slots.enter(ids)
            try:
                completed = await self._run(self._limited(argv))
            except BaseException:
                # Cancelled, its rsync killed: the daemon's side of it may still hold its room a moment.
                self._ended_at = asyncio.get_running_loop().time()
                slots.leave()
                raise
            # Left without waking anyone yet: a refusal below narrows the room first.
            slots.open -= 1
            now = asyncio.get_running_loop().time()
            at_cap = completed.at_cap
            ours = at_cap and (slots.open > 0 or now - self._ended_at < LINGER)
            if ours:
                self._narrow(slots.open)
            elif not at_cap:
                # A call the daemon took (whatever came of it); a refusal handed back as an outage held no room.
                self._ended_at = now
                self._went_through()
            slots.wake()
            if not ours:
                return completed
            await asyncio.sleep(self._pause)

    def _limited(self, argv: list[str]) -> list[str]:
        """``argv`` with its share of the bandwidth, in KiB per second, as rsync takes it (an ``--bwlimit`` of the
        operator's own in ``extra_args`` comes later, and wins).

        The share is the limit over the calls this action opens at once at most, not over those open now: a
        running rsync keeps the rate it started with, so calls started one after another with a share of those
        open then would together take up to twice the limit (1 + 1/2 + 1/3 + 1/4 of it)."""
        total = self._limit() if self._limit is not None else None
        if total is None:
            return argv
        share = max(1, total // max(1, self.at_once) // 1024)
        return [argv[0], f"--bwlimit={share}", *argv[1:]]

    def resize(self, most: int) -> None:
        """At most ``most`` calls at once from now on (a reload of ``max_connections``): calls running go on; the
        daemon's own cap, if lower, is found again as before."""
        held_back = self.at_once < self.most  # the destination's own cap holds the calls below the most
        self.most = most
        self.at_once = min(self.at_once, most) if held_back else most
        self._through = 0
        self._slots.wake()

    def _narrow(self, open_now: int) -> None:
        at_once = max(1, min(self.at_once, open_now))
        if at_once < self.at_once:
            log.info("the destination refuses more connections; fewer at once", destination=self.destination,
                     at_once=at_once, most=self.most)
        self.at_once, self._through = at_once, 0

    def _went_through(self) -> None:
        if self.at_once >= self.most:
            return
        self._through += 1
        if self._through >= PROBE_AFTER * self.at_once:
            self.at_once += 1
            self._through = 0
