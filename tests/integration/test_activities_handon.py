"""A hand-on carries the record's activity: the next site serves it in the same activity when it defines one of
that name, and by its own globs when it does not (a cascade's sites need not define the same activities)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dataq.actions.network_move import NetworkMoveAction
from dataq.actions.registry import load_actions
from dataq.activities import plan_for
from dataq.config import QueueSettings
from dataq.config.activity_settings import ActivitySettings
from dataq.record import Record
from dataq.store import QueueList, QueueStore
from testbed.actions import action_context
from testbed.rsync import RsyncDaemon
from tests.actions_support import LOOPBACK, make_file
from tests.push_support import QUEUE, RunningPush, push_settings, start_push

DATA = b"bias frame " * 4000


def next_site_queue(activities: Mapping[str, ActivitySettings]) -> QueueSettings:
    return QueueSettings(QUEUE, activities=activities)


@pytest.fixture
async def next_site(redis_url: str, tmp_path: Path,
                    request: pytest.FixtureRequest) -> AsyncIterator[tuple[RunningPush, QueueStore]]:
    """The next site's push daemon and its queue, with the activities the test's parameter names."""
    queue = next_site_queue(request.param)
    settings = replace(push_settings(redis_url, tmp_path / "next-data"), queues={QUEUE: queue})
    running = await start_push(settings)
    store = QueueStore.from_url(redis_url, QUEUE, plan=plan_for(queue))
    yield running, store
    await store.close()
    await running.shutdown()


def make_action(daemon: RsyncDaemon, tmp_path: Path, port: int, **options: Any) -> NetworkMoveAction:
    queue = QueueSettings("transfer", actions=("network_move",), action_options={"network_move": {
        "destination": daemon.url("valley", "incoming"), "layout": "{date}/{name}",
        "next_sites": [f"{LOOPBACK}:{port}"], "next_path": "/valley/data/{relpath}", "handon_timeout": 1.0,
        **options}})
    (action,) = load_actions(action_context(queue, site="mountain"))
    assert isinstance(action, NetworkMoveAction)
    return action


async def queued_there(store: QueueStore, record: Record) -> Record:
    (found,) = [r for r in await store.list_records(QueueList.ACTIVE) if r.checksum == record.checksum]
    return found


BACKFILL = {"backfill": ActivitySettings("backfill", share=1), "science": ActivitySettings("science", ("*.fits",))}
SCIENCE_ONLY = {"science": ActivitySettings("science", ("*.fits",))}


@pytest.mark.parametrize(("next_site", "queued_in"), [
    # Its path matches science's globs there: the activity it came with decides.
    (BACKFILL, "backfill"),
    # A next site that lacks the activity queues it by its own globs.
    (SCIENCE_ONLY, "science"),
], indirect=["next_site"])
async def test_a_record_is_handed_on_in_its_activity_or_by_the_next_sites_globs_where_it_lacks_it(
        daemon: RsyncDaemon, next_site: tuple[RunningPush, QueueStore], queued_in: str, tmp_path: Path) -> None:
    push, store = next_site
    record = replace(make_file(tmp_path / "mountain", "a.fits", DATA), activity="backfill")
    action = make_action(daemon, tmp_path, push.port)
    await action.start()
    try:
        await action.run(record)
    finally:
        await action.close()
    assert (await queued_there(store, record)).activity == queued_in
    assert (await store.summary()).activities[queued_in] == 1
