"""An rsync daemon at its ``max connections`` holds back a ``network_move``'s calls past its cap; it is an outage
only when none of the action's own calls fills it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from dataq.actions.connections import PROBE_AFTER, Connections
from dataq.actions.rsync import Completed
from dataq.ops.documents import HELD_BACK_KEY, OPEN_KEY

AT_CAP = "@ERROR: max connections ({cap}) reached -- try again later\nrsync error: error starting client-server " \
         "protocol (code 5) at main.c(1954) [sender=3.5.0]\n"


class Daemon:
    """A daemon that takes ``cap`` connections at once (more: refused, as rsync's), each call taking ``seconds``;
    ``foreign`` connections of other clients hold rooms too."""

    def __init__(self, cap: int, seconds: float = 0.01) -> None:
        self.cap, self.seconds, self.foreign = cap, seconds, 0
        self.open = self.most_open = self.calls = self.refused = 0

    async def run(self, argv: list[str]) -> Completed:
        self.calls += 1
        if self.open + self.foreign >= self.cap:
            self.refused += 1
            return Completed(5, "", AT_CAP.format(cap=self.cap))
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.open -= 1
        return Completed(0, " ".join(argv), "")


async def test_calls_past_the_daemons_cap_wait_for_the_actions_own_and_all_go_through() -> None:
    daemon = Daemon(cap=2)
    connections = Connections("rsync://far/m", 4, daemon.run, pause=0.001)
    results = await asyncio.gather(*(connections.run([f"call {n}"]) for n in range(12)))
    assert [result.status for result in results] == [0] * 12
    assert [result.stdout for result in results] == [f"call {n}" for n in range(12)]
    assert daemon.most_open == 2
    assert connections.at_once == 2, "it opens no more at once than the daemon took"
    assert daemon.refused <= 4, "refused only while it found the cap"
    assert connections.status() == {HELD_BACK_KEY: {"rsync://far/m": {"at_once": 2, "most": 4}},
                                    OPEN_KEY: {"rsync://far/m": {"open": 0, "most": 4}}}


async def test_a_refusal_with_none_of_its_own_calls_open_is_the_callers_an_outage() -> None:
    daemon = Daemon(cap=1)
    daemon.foreign = 1  # another client holds the only room
    connections = Connections("rsync://far/m", 4, daemon.run, pause=0.001)
    for attempt in (1, 2):  # a refusal handed back held no room: the next one is no more the action's own doing
        result = await connections.run(["alone"])
        assert result.status == 5 and result.at_cap
        assert daemon.calls == attempt


class Held:
    """A daemon of one room whose ``long`` call lasts until :attr:`release` is set; ``on_return``, if given, is
    scheduled as that call returns (before the call waiting for its room can run)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.on_return: Callable[[], object] | None = None

    async def run(self, argv: list[str]) -> Completed:
        if argv == ["long"]:
            await self.release.wait()
            if self.on_return is not None:
                asyncio.get_running_loop().call_soon(self.on_return)
        return Completed(0, argv[0], "")


async def room_held(daemon: Held) -> tuple[Connections, asyncio.Task[Completed]]:
    """Connections of one room, and the ``long`` call holding it."""
    connections = Connections("rsync://far/m", 1, daemon.run)
    running = asyncio.create_task(connections.run(["long"]))
    await asyncio.sleep(0.01)
    return connections, running


async def test_cancelling_the_running_call_gives_its_room_to_the_waiting_one() -> None:
    connections, running = await room_held(Held())
    waiting = asyncio.create_task(connections.run(["next"]))
    await asyncio.sleep(0.01)
    running.cancel()
    assert (await asyncio.wait_for(waiting, 2)).stdout == "next"


async def test_a_call_given_the_room_and_cancelled_before_it_runs_passes_the_room_on() -> None:
    daemon = Held()
    connections, running = await room_held(daemon)
    second = asyncio.create_task(connections.run(["second"]))
    third = asyncio.create_task(connections.run(["third"]))
    await asyncio.sleep(0.01)
    daemon.on_return = second.cancel  # runs after "long" gives its room to "second", before "second" takes it
    daemon.release.set()
    assert (await running).stdout == "long"
    with pytest.raises(asyncio.CancelledError):
        await second
    assert (await asyncio.wait_for(third, 2)).stdout == "third"


async def test_it_tries_one_more_at_once_after_enough_calls_went_through_up_to_the_most() -> None:
    daemon = Daemon(cap=2, seconds=0.002)
    connections = Connections("rsync://far/m", 3, daemon.run, pause=0.001)
    await asyncio.gather(*(connections.run(["x"]) for _ in range(6)))
    assert connections.at_once == 2
    daemon.cap = 10  # the operator raised it
    for _ in range(PROBE_AFTER * 2):
        await connections.run(["x"])
    assert connections.at_once == 3
    for _ in range(PROBE_AFTER * 3 * 2):
        await connections.run(["x"])
    assert connections.at_once == 3, "never more than the most"
    assert HELD_BACK_KEY not in connections.status(), "nothing held back to report"
    assert connections.status()[OPEN_KEY] == {"rsync://far/m": {"open": 0, "most": 3}}


async def test_a_waiting_call_that_is_cancelled_leaves_its_room_to_the_next() -> None:
    daemon = Daemon(cap=1, seconds=0.05)
    connections = Connections("rsync://far/m", 1, daemon.run, pause=0.001)
    first = asyncio.create_task(connections.run(["first"]))
    second = asyncio.create_task(connections.run(["second"]))
    third = asyncio.create_task(connections.run(["third"]))
    await asyncio.sleep(0.01)
    second.cancel()
    assert (await first).status == 0
    assert (await asyncio.wait_for(third, 2)).stdout == "third"
    with pytest.raises(asyncio.CancelledError):
        await second


async def test_a_cancelled_call_frees_its_room() -> None:
    daemon = Daemon(cap=1, seconds=10)
    connections = Connections("rsync://far/m", 1, daemon.run, pause=0.001)
    stuck = asyncio.create_task(connections.run(["stuck"]))
    await asyncio.sleep(0.01)
    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck
    daemon.seconds = 0.001
    assert (await asyncio.wait_for(connections.run(["next"]), 2)).status == 0


@pytest.mark.parametrize(("status", "stderr", "refused"), [
    (5, AT_CAP.format(cap=4), True),
    (5, "@ERROR: Unknown module 'm'\n", False),
    (23, "rsync: [sender] link_stat \"/data/max connections (1) reached\" failed\n", False),
    (0, "", False),
])
def test_only_the_daemons_own_refusal_counts_as_being_at_its_cap(status: int, stderr: str, refused: bool) -> None:
    assert Completed(status, "", stderr).at_cap is refused


async def test_max_connections_caps_the_calls_at_once_and_a_reload_resizes_them() -> None:
    daemon = Daemon(cap=100, seconds=0.02)
    connections = Connections("rsync://far/m", 1, daemon.run, pause=0.001)  # max_connections = 1
    await asyncio.gather(*(connections.run([f"call {n}"]) for n in range(6)))
    assert daemon.most_open == 1 and daemon.refused == 0
    connections.resize(3)
    await asyncio.gather(*(connections.run([f"call {n}"]) for n in range(9)))
    assert daemon.most_open == 3
    assert HELD_BACK_KEY not in connections.status(), "the cap is the operator's, not a destination holding back"


async def test_each_call_takes_the_bandwidth_over_the_most_calls_at_once() -> None:
    daemon = Daemon(cap=100)
    connections = Connections("rsync://far/m", 4, daemon.run, pause=0.001, limit=lambda: 8 * 1024 * 1024)
    result = await connections.run(["rsync", "-a"])
    assert result.stdout == "rsync --bwlimit=2048 -a", "8 MiB/s over four calls at most: 2,048 KiB/s each"
    connections.resize(2)
    assert (await connections.run(["rsync", "-a"])).stdout == "rsync --bwlimit=4096 -a"
