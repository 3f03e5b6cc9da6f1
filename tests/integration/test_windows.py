"""A destination's windows on a real pop daemon: outside them it claims nothing and the records wait in the active
list, saying why and until when; as a window opens, they drain. Windows given wrong are a settings error."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dataq.errors import ConfigError
from dataq.ops.why import WaitCode, why
from dataq.store import QueueStore
from testbed.waits import eventually, eventually_equal
from tests.cascade_support import make_sources
from tests.pop_support import counter, load, pop_daemon, write_config


def clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def settings_with(tmp_path: Path, redis_url: str, windows: list[str]) -> Path:
    root = tmp_path / "store"
    root.mkdir(exist_ok=True)
    return write_config(tmp_path, redis_url, actions=["disk_store"],
                        options={"disk_store": {"root": str(root), "windows": windows}})


async def test_outside_its_window_nothing_runs_and_as_it_opens_the_records_drain(
        tmp_path: Path, redis_url: str, store: QueueStore) -> None:
    records = make_sources(tmp_path / "night", 20)
    await store.push_batch(records, source="test")
    opens = time.time() + 4.0
    settings = load(settings_with(tmp_path, redis_url, [f"{clock(opens)}-{clock(opens + 3600)}"]))
    async with pop_daemon(settings):
        async def said_why() -> bool:
            reason = await why(store, records[-1].checksum, 0)
            return reason.code is WaitCode.OUTSIDE_WINDOW

        await eventually(said_why, timeout=3.0, what="--why to say the destination is outside its windows")
        reason = await why(store, records[-1].checksum, 0)
        assert reason.fields["destination"] == str(tmp_path / "store")
        assert abs(float(reason.fields["opens"]) - int(opens)) <= 1.0
        assert await counter(store, "done") == 0 and (await store.summary()).active == 20, "nothing claimed"
        assert time.time() < opens, "the test's window opened too soon to tell"

        await eventually_equal(lambda: counter(store, "done"), 20, timeout=20.0, what="every record done")
        assert time.time() >= int(opens), "nothing ran before the window opened"

        async def no_longer_said() -> bool:
            return all("outside_window" not in (worker.heartbeat or {}) for worker in await store.workers())

        await eventually(no_longer_said, timeout=3.0, what="the heartbeat to say the window is open")


@pytest.mark.parametrize(("windows", "words"), [
    (["19:00-07:00", "06:00-08:00"], "windows: windows '19:00-07:00' and '06:00-08:00' overlap"),
    (["7pm-7am"], "windows: window '7pm-7am': '7pm' is not a time of day"),
])
async def test_windows_given_wrong_stop_the_pop_daemon_naming_the_key(tmp_path: Path, redis_url: str,
                                                                      windows: list[str], words: str) -> None:
    settings = load(settings_with(tmp_path, redis_url, windows))
    with pytest.raises(ConfigError, match=r"queues\.transfer\.disk_store") as refused:
        async with pop_daemon(settings):
            pass
    assert words in str(refused.value)
