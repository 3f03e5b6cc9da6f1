"""A pop worker's slots (:class:`~dataq.pop.ledger.SlotLedger`): its rules hold over any sequence of claims, ends
and writes, as the worker drives it (it claims at most what the ledger says is free)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dataq.pop.ledger import SlotLedger

IDS = st.sampled_from([f"id{n}" for n in range(6)])


class Worker(RuleBasedStateMachine):
    """A worker's life in steps: claims of what is free, actions ending, outcomes written (some stale)."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = SlotLedger(3)
        self.running: list[str] = []
        """Claimed ids whose actions run, as the worker knows them."""
        self.finished: list[str] = []
        """Ids whose actions ended and whose outcomes wait to be written."""
        self.postponing = False
        self.unreachable = False
        self.probe_running = False

    def free(self) -> int:
        return self.ledger.free(postponing=self.postponing, unreachable=self.unreachable,
                                probe_running=self.probe_running)

    @rule(record_id=IDS, data=st.data())
    def claim(self, record_id: str, data: st.DataObject) -> None:
        if self.free() <= 0:
            return
        held_before = record_id in self.running or record_id in self.finished
        assert self.ledger.claim(record_id) is held_before, "claimed again exactly when still held"
        self.running.append(record_id)
        if self.unreachable:
            self.probe_running = data.draw(st.booleans())

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def end(self, data: st.DataObject) -> None:
        record_id = data.draw(st.sampled_from(self.running))
        self.running.remove(record_id)
        self.finished.append(record_id)
        self.ledger.end()
        self.probe_running = False

    @precondition(lambda self: self.finished)
    @rule(data=st.data())
    def write(self, data: st.DataObject) -> None:
        written = data.draw(st.lists(st.sampled_from(self.finished), min_size=1, unique=True))
        for record_id in written:
            self.finished.remove(record_id)
        self.ledger.written(written)

    @rule(record_id=IDS)
    def write_a_stale_outcome(self, record_id: str) -> None:
        # A second write of an outcome the worker no longer holds: frees nothing.
        if record_id not in self.running and record_id not in self.finished:
            self.ledger.written([record_id])

    @rule(postponing=st.booleans(), unreachable=st.booleans())
    def conditions(self, postponing: bool, unreachable: bool) -> None:
        self.postponing, self.unreachable = postponing, unreachable

    @invariant()
    def counts_match_what_the_worker_holds(self) -> None:
        assert self.ledger.running == len(self.running)
        assert self.ledger.held == len(self.running) + len(self.finished)
        assert self.ledger.ids() == set(self.running) | set(self.finished)

    @invariant()
    def at_most_concurrency_run_and_as_many_wait(self) -> None:
        assert 0 <= self.ledger.running <= self.ledger.held
        assert self.ledger.running <= self.ledger.concurrency
        assert self.ledger.held <= 2 * self.ledger.concurrency

    @invariant()
    def free_obeys_the_rules(self) -> None:
        free = self.free()
        assert 0 <= free <= self.ledger.concurrency - self.ledger.running
        assert free <= 2 * self.ledger.concurrency - self.ledger.held
        if self.postponing:
            assert free == 0, "nothing claimed past a record going back to the head of the queue"
        elif self.unreachable:
            assert free <= 1, "one probe at a time"
            if self.ledger.running or self.probe_running:
                assert free == 0, "a probe only when nothing else runs"


Worker.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestWorkerSlots = Worker.TestCase


def test_a_free_worker_claims_up_to_its_concurrency() -> None:
    ledger = SlotLedger(4)
    assert ledger.free(postponing=False, unreachable=False, probe_running=False) == 4
    for n in range(4):
        assert not ledger.claim(f"id{n}")
    assert ledger.free(postponing=False, unreachable=False, probe_running=False) == 0


def test_finished_records_free_their_running_slot_at_once_but_their_held_slot_only_once_written() -> None:
    ledger = SlotLedger(2)
    for n in range(2):
        ledger.claim(f"id{n}")
    ledger.end()
    ledger.end()
    assert ledger.free(postponing=False, unreachable=False, probe_running=False) == 2, "the next claim travels"
    ledger.claim("id2")
    ledger.claim("id3")
    ledger.end()
    ledger.end()
    assert ledger.free(postponing=False, unreachable=False, probe_running=False) == 0, "four outcomes wait"
    ledger.written(["id0"])
    assert ledger.free(postponing=False, unreachable=False, probe_running=False) == 1


def test_a_record_claimed_again_while_its_earlier_outcome_waits_is_held_twice() -> None:
    ledger = SlotLedger(2)
    ledger.claim("a")
    ledger.end()
    assert ledger.claim("a") is True
    ledger.written(["a"])
    assert ledger.holds("a") and ledger.held == 1
    ledger.written(["a"])
    assert not ledger.holds("a") and ledger.held == 0


def test_an_end_the_ledger_never_saw_start_is_a_bug() -> None:
    with pytest.raises(RuntimeError, match="never saw start"):
        SlotLedger(1).end()
