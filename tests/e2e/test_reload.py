"""SIGHUP to a running dataq pop: it takes its actions' windows and bandwidth again from its settings file, without
a restart (the same process goes on); other changes wait for the next start, and a file with a mistake changes
nothing and stops nothing."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from dataq.store import QueueStore
from testbed.waits import eventually, eventually_equal
from tests.cascade_support import make_sources
from tests.pop_support import PopProcess, counter, processes, write_config

LOG = "pop.log"


def settings(tmp_path: Path, redis_url: str, **disk_store: object) -> Path:
    root = tmp_path / "store"
    root.mkdir(exist_ok=True)
    return write_config(tmp_path, redis_url, actions=["disk_store"],
                        options={"disk_store": {"root": str(root), **disk_store}})


def logged(tmp_path: Path, event: str) -> list[dict[str, object]]:
    path = tmp_path / "log" / LOG
    lines = path.read_text().splitlines() if path.exists() else []
    return [entry for entry in map(json.loads, lines) if entry.get("event") == event]


async def test_a_hang_up_closes_and_opens_a_window_in_the_running_daemon(tmp_path: Path, redis_url: str,
                                                                          store: QueueStore) -> None:
    never = time.strftime("%H:%M", time.localtime(time.time() + 7200)) + "-" + \
        time.strftime("%H:%M", time.localtime(time.time() + 10800))
    config = settings(tmp_path, redis_url)
    with processes() as started:
        pop = PopProcess(config)
        started.append(pop)
        await pop.registered(store)
        first = make_sources(tmp_path / "night", 5, prefix="first")
        await store.push_batch(first, source="test")
        await eventually_equal(lambda: counter(store, "done"), 5, what="the first records done")

        # Outside every window now, and a key that waits for the next start: the window is taken at once, and so
        # is the root's max_connections.
        settings(tmp_path, redis_url, windows=[never], verify=False, max_connections=1)
        pop.signal(signal.SIGHUP)

        async def outside() -> bool:
            return any("outside_window" in (worker.heartbeat or {}) for worker in await store.workers())

        await eventually(outside, what="the reloaded window to close")
        second = make_sources(tmp_path / "night", 5, prefix="second")
        await store.push_batch(second, source="test")
        assert (await store.summary()).active == 5 and await counter(store, "done") == 5, "nothing claimed"
        assert logged(tmp_path, "settings changed that take effect at the next start")[-1]["keys"] == ["verify"]
        assert logged(tmp_path, "settings reloaded")[-1]["max_connections"] == 1

        # A mistake in the file: refused whole, the daemon goes on with the window in use.
        settings(tmp_path, redis_url, windows=["7pm-7am"])
        pop.signal(signal.SIGHUP)

        async def refused() -> bool:
            return bool(logged(tmp_path, "settings not reloaded: the file has an error; the settings in use stay"))

        await eventually(refused, what="the refused reload to be logged")
        assert pop.alive() and await outside()

        settings(tmp_path, redis_url)
        pop.signal(signal.SIGHUP)
        await eventually_equal(lambda: counter(store, "done"), 10, what="the records done once the window is gone")
        assert pop.alive(), "the same process all along"
        pop.signal(signal.SIGTERM)
        assert await pop.wait() == 0
