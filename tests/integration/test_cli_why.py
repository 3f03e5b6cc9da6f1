"""Why a record failed, from dataq-cli: ``--list inactive`` says each record's errors and last error, and
``--show ID`` says everything about one record."""

from __future__ import annotations

from collections.abc import Callable

from click.testing import Result

from dataq.record import Record
from dataq.store import QueueStore, RetryPolicy
from dataq.store.lifecycle import NO_DELAY
from tests.cli_support import by_switch, listed, on_store, seed

WORKER = "vm:42:pop:abcdef"
MISSING = "network_move: source file /data/x.fits does not exist"


async def registered(store: QueueStore) -> None:
    await store.heartbeat(WORKER, {"role": "pop"}, {}, 30.0)


def fail(redis_url: str, record: Record, message: str, *, times: int = 1, max_errors: int = 0,
         retry: RetryPolicy = NO_DELAY) -> None:
    """Claim the record (next to run) and fail it ``times`` times, as a pop daemon would."""
    async def work(store: QueueStore) -> None:
        await registered(store)
        for _ in range(times):
            (claimed,) = (await store.claim(WORKER, 1)).records
            assert claimed.id == record.id
            await store.fail(WORKER, [(record.id, message)], max_errors=max_errors, retry=retry)

    on_store(redis_url, work)


def test_list_inactive_ends_each_line_with_its_error_count_and_last_error(cli: Callable[..., Result],
                                                                         redis_url: str) -> None:
    (failing,) = seed(redis_url, 1)
    fail(redis_url, failing, f"{MISSING}\nsecond line of it", times=3, max_errors=2)
    deactivated, active = seed(redis_url, 2, start=1)
    assert cli("--deactivate", deactivated.id, deactivated.id).exit_code == 0
    lines = cli("--list", "inactive").output.splitlines()
    assert lines == [
        f"{deactivated.checksum} : path={deactivated.path}, size={deactivated.size}, errors=0",
        f"{failing.checksum} : path={failing.path}, size={failing.size}, errors=3, "
        f"error={MISSING} second line of it",
    ]
    assert cli("--list", "active").output.splitlines() == listed([active]), "other lists keep their line"


def test_list_inactive_in_json_has_the_errors_and_last_error_of_each_record(cli: Callable[..., Result],
                                                                            redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    fail(redis_url, record, MISSING)
    (doc,) = by_switch(cli("--list", "inactive", "--json").output)["list"]["records"]
    assert (doc["checksum"], doc["errors"], doc["crashes"], doc["last_error"]) == (record.id, 1, 0, MISSING)
    (active_doc,) = by_switch(cli("--list", "records", "--json").output)["list"]["records"]
    assert "errors" not in active_doc


def test_show_an_active_record_gives_its_place_in_the_run_order_and_its_events(cli: Callable[..., Result],
                                                                              redis_url: str) -> None:
    first, second, third = seed(redis_url, 3)
    output = cli("--show", second.id).output
    assert f"Record {second.id} of queue transfer" in output
    assert "where:      active, 2 of 3 in the run order (1 runs next)" in output
    assert f"path:       {second.path}" in output and f"size:       {second.size}" in output
    assert "by test" in output and "pushed" in output.split("events:")[1]
    doc = by_switch(cli("--show", first.id, "--json").output)["show"]
    assert (doc["where"], doc["place"], doc["errors"], doc["last_error"]) == ("active", 1, 0, None)
    assert doc["fields"]["path"] == first.path and [e["kind"] for e in doc["events"]] == ["pushed"]
    assert third


def test_show_an_inactive_record_gives_its_errors_and_last_error(cli: Callable[..., Result], redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    fail(redis_url, record, MISSING, times=2, max_errors=1)
    output = cli("--show", record.id).output
    assert "where:      inactive" in output and "errors:     2" in output
    assert f"last error: {MISSING}" in output
    kinds = [e["kind"] for e in by_switch(cli("--show", record.id, "--json").output)["show"]["events"]]
    assert kinds == ["pushed", "claimed", "failed", "claimed", "deactivated"]


def test_show_a_delayed_record_says_until_when(cli: Callable[..., Result], redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    fail(redis_url, record, "busy", max_errors=5, retry=RetryPolicy(delay=3600, jitter=0))
    doc = by_switch(cli("--show", record.id, "--json").output)["show"]
    assert doc["where"] == "delayed" and doc["due"] > 0
    assert "where:      delayed until " in cli("--show", record.id).output


def test_show_a_record_in_flight_names_the_worker_that_holds_it(cli: Callable[..., Result], redis_url: str) -> None:
    (record,) = seed(redis_url, 1)

    async def claim(store: QueueStore) -> None:
        await registered(store)
        await store.claim(WORKER, 1)

    on_store(redis_url, claim)
    assert f"where:      in flight, held by worker {WORKER}" in cli("--show", record.id).output


def finish(redis_url: str, record: Record) -> None:
    """Claim the record (next to run) and acknowledge it, as a pop daemon would."""
    async def run(store: QueueStore) -> None:
        await registered(store)
        await store.claim(WORKER, 1)
        await store.ack(WORKER, [(record.id, "duration_ms=3")])

    on_store(redis_url, run)


def test_show_a_finished_record_says_done_from_its_events(cli: Callable[..., Result], redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    finish(redis_url, record)
    result = cli("--show", record.id)
    assert result.exit_code == 0
    assert "where:      done (acknowledged: no longer tracked)" in result.output


def test_show_an_unknown_record_is_a_refusal(cli: Callable[..., Result], redis_url: str) -> None:
    result = cli("--show", "0" * 32)
    assert result.exit_code == 1 and "unknown: not tracked" in result.output


def test_show_an_id_that_is_no_checksum_is_refused_before_redis_is_asked(cli: Callable[..., Result]) -> None:
    result = cli("--show", "not-a-checksum")
    assert result.exit_code == 1 and "--show 'not-a-checksum'" in result.output


def test_trace_of_a_record_done_here_without_a_next_site_is_one_hop_done(cli: Callable[..., Result],
                                                                           redis_url: str) -> None:
    (record,) = seed(redis_url, 1)
    finish(redis_url, record)
    result = cli("--trace", record.id)
    assert result.exit_code == 0, result.output
    assert "across 1 site(s)" in result.output and ": done" in result.output
    (hop,) = by_switch(cli("--trace", record.id, "--json").output)["trace"]["hops"]
    assert hop["state"] == "done" and hop["address"] is None and hop["pushed"] <= hop["done"]


def test_trace_of_an_unknown_record_is_a_refusal_and_a_bad_id_is_refused_naming_the_switch(
        cli: Callable[..., Result]) -> None:
    result = cli("--trace", "0" * 32)
    assert result.exit_code == 1 and "unknown" in result.output
    result = cli("--trace", "not-a-checksum")
    assert result.exit_code == 1 and "--trace 'not-a-checksum'" in result.output
