"""Property: whatever sequence of operations runs, every tracked id is in exactly one place and the store
matches a plain-Python model of the queue, list order included."""

from __future__ import annotations

import asyncio
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from dataq.errors import RangeError
from dataq.store import FailOutcome, QueueList, QueueStore
from tests.helpers import make_records

POOL = make_records(12)
IDS = [r.checksum for r in POOL]
WORKERS = ["w1", "w2"]
MAX_ERRORS = 1

ids = st.sampled_from(IDS)
workers = st.sampled_from(WORKERS)


class QueueModel(RuleBasedStateMachine):
    """Lists are modelled left to right exactly as Redis holds them (index 0 = left = newest)."""

    redis_url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = QueueStore.from_url(self.redis_url, "prop")
        self.active: list[str] = []
        self.inactive: list[str] = []
        self.processing: dict[str, list[str]] = {w: [] for w in WORKERS}
        self.errors: dict[str, int] = {}
        self.done: set[str] = set()
        """Ids acknowledged: remembered done (``remember_done``), so a push of one is a duplicate."""

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.client.flushall())
        self.run(self.store.close())
        self.loop.close()

    def tracked(self) -> set[str]:
        return set(self.active) | set(self.inactive) | {i for p in self.processing.values() for i in p}

    @initialize()
    def register_workers(self) -> None:
        self.run(self.store.client.flushall())
        for worker in WORKERS:
            self.run(self.store.heartbeat(worker, {"role": "pop"}, {}, ttl=60))

    @rule(batch=st.lists(ids, min_size=1, max_size=5))
    def push(self, batch: list[str]) -> None:
        records = [POOL[IDS.index(i)] for i in batch]
        result = self.run(self.store.push_batch(records, source="prop"))
        expected = []
        for record_id in batch:
            fresh = record_id not in self.tracked() and record_id not in self.done
            expected.append(fresh)
            if fresh:
                self.active.insert(0, record_id)
        assert result.pushed == expected

    @rule(worker=workers, count=st.integers(1, 4))
    def claim(self, worker: str, count: int) -> None:
        claimed = self.run(self.store.claim(worker, count)).records
        expected = []
        for _ in range(min(count, len(self.active))):
            record_id = self.active.pop()
            self.processing[worker].insert(0, record_id)
            expected.append(record_id)
        assert [r.checksum for r in claimed] == expected

    @rule(worker=workers, record_id=ids)
    def ack(self, worker: str, record_id: str) -> None:
        owned = record_id in self.processing[worker]
        assert self.run(self.store.ack(worker, [(record_id, "")])) == [owned]
        if owned:
            self.processing[worker].remove(record_id)
            self.errors.pop(record_id, None)
            self.done.add(record_id)

    @rule(worker=workers, record_id=ids)
    def fail(self, worker: str, record_id: str) -> None:
        outcome = self.run(self.store.fail(worker, [(record_id, "err")], max_errors=MAX_ERRORS))
        if record_id not in self.processing[worker]:
            assert outcome == [FailOutcome.NOT_OWNED]
            return
        self.processing[worker].remove(record_id)
        self.errors[record_id] = self.errors.get(record_id, 0) + 1
        if self.errors[record_id] > MAX_ERRORS:
            self.inactive.insert(0, record_id)
            assert outcome == [FailOutcome.INACTIVE]
        else:
            self.active.insert(0, record_id)
            assert outcome == [FailOutcome.RETRY]

    @rule(worker=workers, batch=st.lists(ids, min_size=1, max_size=3, unique=True))
    def postpone(self, worker: str, batch: list[str]) -> None:
        """Destination unreachable: back to the next-to-run end, the first given next, no error counted."""
        owned = [record_id in self.processing[worker] for record_id in batch]
        assert self.run(self.store.postpone(worker, [(record_id, "down") for record_id in batch])) == owned
        for record_id in reversed([r for r, mine in zip(batch, owned, strict=True) if mine]):
            self.processing[worker].remove(record_id)
            self.active.append(record_id)

    @rule(worker=workers)
    def release(self, worker: str) -> None:
        self.run(self.store.release(worker))
        self.active.extend(self.processing[worker])
        self.processing[worker] = []

    @rule(
        mode=st.sampled_from(["advance", "deactivate", "activate", "delete-active", "delete-inactive"]),
        first=ids,
        last=ids,
    )
    def range_command(self, mode: str, first: str, last: str) -> None:
        source = self.inactive if mode in ("activate", "delete-inactive") else self.active
        call = {
            "advance": lambda: self.store.advance(first, last),
            "deactivate": lambda: self.store.deactivate(first, last),
            "activate": lambda: self.store.activate(first, last),
            "delete-active": lambda: self.store.delete(QueueList.ACTIVE, first, last),
            "delete-inactive": lambda: self.store.delete(QueueList.INACTIVE, first, last),
        }[mode]
        if first not in source or last not in source or source.index(first) > source.index(last):
            try:
                self.run(call())
            except RangeError:
                return
            raise AssertionError("a bad range was accepted")
        i, j = source.index(first), source.index(last)
        moved = source[i : j + 1]
        del source[i : j + 1]
        assert self.run(call()) == len(moved)
        if mode == "advance":
            self.active.extend(moved)
        elif mode == "deactivate":
            self.inactive[:0] = moved
        elif mode == "activate":
            self.active[:0] = moved
            for record_id in moved:
                self.errors.pop(record_id, None)
        else:
            for record_id in moved:
                self.errors.pop(record_id, None)

    @rule()
    def activate_all(self) -> None:
        assert self.run(self.store.activate_all()) == len(self.inactive)
        self.active[:0] = self.inactive
        for record_id in self.inactive:
            self.errors.pop(record_id, None)
        self.inactive = []

    @rule()
    def clear(self) -> None:
        assert self.run(self.store.clear()) == len(self.tracked())
        self.active, self.inactive = [], []
        self.processing = {w: [] for w in WORKERS}
        self.errors = {}

    @invariant()
    def store_matches_model(self) -> None:
        k = self.store.keys
        # One round trip for the whole picture: the invariant runs after every step.
        pipe = self.store.r.pipeline(transaction=False)
        pipe.lrange(k.active, 0, -1).lrange(k.inactive, 0, -1)
        for worker in WORKERS:
            pipe.lrange(k.processing(worker), 0, -1)
        pipe.hkeys(k.records).hgetall(k.errors)
        active, inactive, *lists, keys, error_counts = self.run(pipe.execute())
        processing = dict(zip(WORKERS, lists, strict=True))
        tracked = set(keys)
        assert active == self.active
        assert inactive == self.inactive
        assert processing == self.processing
        places = active + inactive + [i for p in processing.values() for i in p]
        assert len(places) == len(set(places)), "an id is in two places"
        assert tracked == set(places), "records hash and lists disagree"
        errors = {i: int(n) for i, n in error_counts.items()}
        assert errors == self.errors
        summary = self.run(self.store.summary())
        assert (summary.active, summary.inactive, summary.in_flight, summary.tracked) == (
            len(active),
            len(inactive),
            sum(len(p) for p in processing.values()),
            len(tracked),
        )


@pytest.mark.timeout(300)  # 5,000 steps against a real Redis: over 120 s on a loaded two-core machine
def test_store_keeps_every_record_in_exactly_one_place(redis_url: str) -> None:
    QueueModel.redis_url = redis_url
    runner = settings(
        max_examples=200,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )(QueueModel)
    runner.TestCase().runTest()
