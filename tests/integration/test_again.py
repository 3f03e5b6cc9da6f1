"""Running a done record again on purpose: records marked *again*, ``--clear`` forgetting the remembered done ids,
and ``remember_done = 0`` (the 2014 data-q's behaviour), against a real Redis."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from click.testing import Result

from dataq.activities import Activity, Plan
from dataq.cli.options import EXIT_USAGE
from dataq.record import Record, format_line
from dataq.store import CustodyEntry, CustodyStep, LastAnswer, Lost, QueueList, QueueStore, Step
from tests.cli_support import QUEUE, by_switch, ids, on_store, seed
from tests.helpers import make_records

WORKER = "w-again"
Cli = Callable[..., Result]


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


async def run_to_done(store: QueueStore, records: Sequence[Record]) -> None:
    """What a pop daemon does with the records: claim them and acknowledge them done."""
    await store.heartbeat(WORKER, {"role": "pop"}, {"running": 0}, 30.0)
    claimed = await store.claim(WORKER, len(records))
    assert sorted(r.checksum for r in claimed.records) == sorted(r.checksum for r in records)
    assert all(await store.ack(WORKER, [(r.checksum, "") for r in claimed.records]))


def done(redis_url: str, records: Sequence[Record]) -> None:
    on_store(redis_url, lambda store: run_to_done(store, records))


async def test_a_record_sent_again_is_stored_though_remembered_done_and_keeps_its_mark(store: QueueStore) -> None:
    first, second = make_records(2)
    await store.push_batch([first, second], source="feeder")
    await run_to_done(store, [first, second])
    assert (await store.push_batch([first, second], source="feeder")).pushed == [False, False]

    result = await store.push_batch([dataclasses.replace(first, again=True), second], source="feeder")
    assert result.pushed == [True, False]
    claim = await store.claim(WORKER, 10)
    (claimed,) = claim.records
    # The mark travels with the stored record: a hand-on of it is marked again too.
    assert (claimed.checksum, claimed.again) == (first.checksum, True)


async def test_a_record_sent_again_while_it_is_still_tracked_is_a_duplicate(store: QueueStore) -> None:
    (record,) = make_records(1)
    await store.push_batch([record], source="feeder")
    again = dataclasses.replace(record, again=True)
    assert (await store.push_batch([again], source="feeder")).pushed == [False]
    assert (await store.summary()).tracked == 1


async def test_forget_done_forgets_every_remembered_id_and_says_how_many(store: QueueStore) -> None:
    records = make_records(300)
    for start in range(0, 300, 100):
        await store.push_batch(records[start:start + 100], source="feeder")
    await run_to_done(store, records)
    assert await store.forget_done() == 300
    assert all((await store.push_batch(records, source="feeder")).pushed)
    assert await store.forget_done() == 0


async def test_remember_done_0_remembers_nothing(redis_url: str) -> None:
    store = QueueStore.from_url(redis_url, "unremembering", remember_done=0)
    try:
        await store.clear()
        (record,) = make_records(1)
        await store.push_batch([record], source="feeder")
        await run_to_done(store, [record])
        assert await store.forget_done() == 0  # nothing was written
        assert (await store.push_batch([record], source="feeder")).pushed == [True]
        (known,) = await store.whereabouts([record.checksum], max_errors=3)
        assert known is not None
    finally:
        await store.close()


async def test_a_queue_that_remembers_nothing_keeps_its_activities_custody_and_audits(redis_url: str) -> None:
    # Nothing remembered, nothing named: the scripts then find their other keys where the shards would have been.
    plan = Plan((Activity("express", 0, ("*/calib/*",)), Activity("default")))
    store = QueueStore.from_url(redis_url, "unremembering", remember_done=0, plan=plan)
    try:
        await store.clear()
        express = [dataclasses.replace(r, path=r.path.replace("/mtn/", "/mtn/calib/"), activity="express")
                   for r in make_records(2, start=50)]
        plain = make_records(3, start=60)
        await store.push_batch([*plain, *express], source="feeder")
        assert (await store.summary()).activities == {"express": 2, "default": 3}
        await run_to_done(store, [*plain, *express])
        counters = await store.counters()
        assert (counters["done@express"], counters["done"]) == (2, 5)
        # A record handed on: its receipt settles it, and a resend puts it back in its own activity's list.
        now = time.time()
        await store.keep([CustodyEntry(express[0], "valley:1", now), CustodyEntry(express[1], "valley:1", now)],
                         first_ask=now)
        first, second = await store.custody_due(10, now=now + 1)
        resent = CustodyEntry(second.record, second.site, second.handed_at, last=LastAnswer("unknown", "valley"),
                              resends=1)
        assert await store.apply_steps([CustodyStep(Step.DONE, first, end_at=now + 1),
                                        CustodyStep(Step.RESEND, second, replacement=resent)], 60,
                                       now=now + 1) == [True, True]
        assert (await store.summary()).activities == {"express": 1, "default": 0}
        assert await store.mark_lost([(plain[0].checksum, "missing_copy: a test")]) == [True]
        (known,) = await store.whereabouts([plain[0].checksum], max_errors=3)
        assert isinstance(known, Lost)
    finally:
        await store.close()


# --- dataq-cli --------------------------------------------------------------------------------------------------


def test_the_2014_sequence_clear_then_load_moves_done_records_again(cli: Cli, tmp_path: Path, redis_url: str) -> None:
    records = seed(redis_url, 5)
    dump = tmp_path / "night.txt"
    ok(cli("--dump", str(dump)))
    done(redis_url, records)
    ok(cli("--load", str(dump)))
    assert ids(redis_url, QueueList.ACTIVE) == []  # done lately: every record ignored

    assert ok(cli("--clear")).stdout == "Cleared 0 records\nForgot 5 remembered done ids\n"
    ok(cli("--load", str(dump)))
    assert sorted(ids(redis_url, QueueList.ACTIVE)) == sorted(r.checksum for r in records)
    assert by_switch(ok(cli("--clear", "--json")).stdout)["clear"] == {
        "switch": "clear", "queue": QUEUE, "cleared": 5, "forgot_done": 0}


def test_again_pushes_done_records_with_load_pushstr_and_pushfile(cli: Cli, tmp_path: Path, redis_url: str) -> None:
    data = tmp_path / "frame.fits"
    data.write_bytes(b"a frame")
    ok(cli("--pushfile", str(data)))
    loaded, pushed = make_records(2, start=40)
    listing = tmp_path / "records.txt"
    listing.write_text(format_line(loaded) + "\n")
    ok(cli("--load", str(listing), "--pushstr", format_line(pushed)))
    records = on_store(redis_url, lambda s: s.list_records(QueueList.ACTIVE))
    done(redis_url, records)

    assert ok(cli("--pushstr", format_line(pushed))).stdout.startswith("Ignored ID=")
    out = ok(cli("--again", "--pushstr", format_line(pushed), "--pushfile", str(data), "--load", str(listing)))
    (from_file,) = [record for record in records if record.path == str(data)]
    assert out.stdout.splitlines()[:2] == [f"Pushed ID={pushed.checksum}", f"Pushed ID={from_file.checksum}"]
    again = on_store(redis_url, lambda s: s.list_records(QueueList.ACTIVE))
    assert len(again) == 3 and all(record.again for record in again)
    # Still tracked: sent again, they are duplicates like any other.
    assert ok(cli("--again", "--pushstr", format_line(pushed))).stdout == f"Ignored ID={pushed.checksum}\n"


def test_again_without_records_to_push_is_a_usage_error(cli: Cli) -> None:
    result = cli("--again", "--summary")
    assert result.exit_code == EXIT_USAGE
    assert "--again applies to --load, --pushstr and --pushfile" in result.stderr
