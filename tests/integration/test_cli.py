"""dataq-cli against a real Redis: what each switch does and prints, in both output forms."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from dataq.cli import operations
from dataq.record import format_line
from dataq.store import Flag, QueueList, QueueStore
from tests.cli_support import OTHER_QUEUE, QUEUE, by_switch, documents, ids, listed, on_store, seed
from tests.helpers import make_records

Cli = Callable[..., Result]
WORKER = "host-1:4242:pop:abc123"


def register(redis_url: str, worker: str = WORKER, ttl: float = 30.0, **stats: object) -> None:
    async def beat(store: QueueStore) -> None:
        info = {"role": "pop", "host": "host-1", "pid": 4242, "started": time.time() - 60}
        await store.heartbeat(worker, info, {"done": 7, "failed": 1, "running": 2, **stats}, ttl)

    on_store(redis_url, beat)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


# --- --help --------------------------------------------------------------------------------------------------


def test_help_states_the_fixed_order_and_every_exit_status(cli: Cli) -> None:
    text = ok(cli("--help")).stdout
    positions = [text.index(f"{n:>2}. {switches}") for n, (switches, _, _) in enumerate(operations.STEPS, start=1)]
    assert positions == sorted(positions)
    # Flags and state changes first, the summary last (only --follow, which never ends, comes after it).
    assert " 1. --action, --read" in text and "14. --summary" in text and "15. --follow" in text
    for line in ("0  success", "1  refused", "2  usage error", "3  configuration error", "4  Redis is unavailable"):
        assert line in text


# --- --summary and --info ------------------------------------------------------------------------------------


def test_summary_reports_counts_flags_live_workers_and_rates(cli: Cli, redis_url: str) -> None:
    records = seed(redis_url, 4)
    on_store(redis_url, lambda s: s.deactivate(records[0].checksum, records[0].checksum))
    on_store(redis_url, lambda s: s.set_flag(Flag.READ, False))
    register(redis_url)
    register(redis_url, "host-2:1:pop:dead00", ttl=0.01)
    time.sleep(0.05)

    text = ok(cli("--summary")).stdout
    assert "active:    3" in text and "inactive:  1" in text and "tracked:   4 records" in text
    assert "action:    on" in text and "read:      off" in text
    assert "workers:   1 live (2 registered)" in text
    assert re.search(r"rates:     4\.\d pushed, 0\.0 done, 0\.0 failed per minute \(over the last \d+ s\)", text)

    doc = by_switch(ok(cli("-s", "--json")).stdout)["summary"]
    assert doc["queue"] == QUEUE
    assert (doc["active"], doc["inactive"], doc["in_flight"], doc["delayed"], doc["tracked"]) == (3, 1, 0, 0, 4)
    assert (doc["action"], doc["read"], doc["workers"], doc["alive_workers"]) == (True, False, 2, 1)
    rates = doc["rates"]
    # The last minute is counted in 10-second buckets: the five before the current one, and the current one as
    # far as it has run.
    assert 50 <= rates["covered_seconds"] <= 60
    assert rates["pushed_per_minute"] == pytest.approx(4 * 60 / rates["covered_seconds"], rel=1e-3)
    assert (rates["done_per_minute"], rates["failed_per_minute"]) == (0.0, 0.0)
    assert (rates["window_seconds"], rates["complete"]) == (60.0, True)


def test_summary_says_when_the_queue_is_older_than_its_rate_counting(cli: Cli, redis_url: str) -> None:
    async def older_queue(store: QueueStore) -> None:
        await store.r.hset(store.keys.counters, "pushed", 100)  # counted by a version without the rates ring
        await store.push_batch(make_records(5), source="test")

    on_store(redis_url, older_queue)
    rates = by_switch(ok(cli("--summary", "--json")).stdout)["summary"]["rates"]
    assert rates["complete"] is False and rates["covered_seconds"] < 10
    assert "s only: counting began then" in ok(cli("--summary")).stdout


def test_summary_never_reads_the_event_stream(cli: Cli, redis_url: str) -> None:
    async def busy_queue(store: QueueStore) -> None:
        records = make_records(2000)
        for start in range(0, 2000, 100):
            await store.push_batch(records[start : start + 100], source="test")
        await store.heartbeat(WORKER, {"role": "pop"}, {}, ttl=30)
        claim = await store.claim(WORKER, 1000)
        await store.ack(WORKER, [(record.id, "ok") for record in claim.records])

    def stream_reads() -> int:
        async def read(store: QueueStore) -> int:
            stats = await store.r.info("commandstats")
            return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
                       for name in ("xread", "xrange", "xrevrange", "xinfo|stream", "xlen"))

        return on_store(redis_url, read)

    on_store(redis_url, busy_queue)
    before = stream_reads()
    doc = by_switch(ok(cli("--summary", "--json")).stdout)["summary"]
    assert stream_reads() == before
    covered = doc["rates"]["covered_seconds"]
    assert doc["rates"]["pushed_per_minute"] == pytest.approx(2000 * 60 / covered, rel=1e-3)
    assert doc["rates"]["done_per_minute"] == pytest.approx(1000 * 60 / covered, rel=1e-3)


def test_info_reports_version_memory_persistence_role_and_clients(cli: Cli) -> None:
    text = ok(cli("--info")).stdout
    for key in ("redis_version:", "used_memory_human:", "aof_enabled:", "role:", "connected_clients:"):
        assert key in text
    server = by_switch(ok(cli("-i", "--json")).stdout)["info"]["server"]
    assert server["role"] == "master" and server["redis_version"].count(".") == 2
    assert server["aof_enabled"] == 1 and server["appendfsync"] == "always"


# --- --list and paging ---------------------------------------------------------------------------------------


def test_list_active_prints_newest_first_and_next_to_run_last(cli: Cli, redis_url: str) -> None:
    records = seed(redis_url, 5)
    assert ok(cli("--list", "active")).stdout.splitlines() == listed(records[::-1])


def test_list_inactive_and_records_print_their_own_records(cli: Cli, redis_url: str) -> None:
    records = seed(redis_url, 5)
    on_store(redis_url, lambda s: s.deactivate(records[3].checksum, records[2].checksum))
    # Deactivated by hand, never failed: no error to tell (tests/integration/test_cli_why.py has the failures).
    assert ok(cli("-l", "inactive")).stdout.splitlines() == [
        f"{line}, errors=0" for line in listed([records[3], records[2]])]
    assert sorted(ok(cli("-l", "records")).stdout.splitlines()) == sorted(listed(records))


def test_list_of_an_empty_queue_prints_nothing(cli: Cli) -> None:
    assert ok(cli("--list", "active")).stdout == ""
    doc = by_switch(ok(cli("--list", "active", "--json")).stdout)["list"]
    assert doc["records"] == [] and doc["count"] == 0


@pytest.mark.parametrize(("offset", "limit"), [(0, 3), (5, 10), (20, 10), (25, 5), (3, 0)])
def test_list_pages_with_offset_and_limit_across_read_chunks(
    cli: Cli, redis_url: str, monkeypatch: pytest.MonkeyPatch, offset: int, limit: int
) -> None:
    monkeypatch.setattr(operations, "LIST_CHUNK", 4)
    in_list_order = seed(redis_url, 25)[::-1]
    text = ok(cli("--list", "active", "--offset", str(offset), "--limit", str(limit))).stdout
    assert text.splitlines() == listed(in_list_order[offset : offset + limit])


def test_list_records_pages_the_same_records_as_the_whole_listing(
    cli: Cli, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operations, "LIST_CHUNK", 4)
    seed(redis_url, 25)
    whole = ok(cli("--list", "records")).stdout.splitlines()
    pages = [ok(cli("-l", "records", "--offset", str(o), "--limit", "10")).stdout.splitlines() for o in (0, 10, 20)]
    assert [len(p) for p in pages] == [10, 10, 5]
    assert sorted(line for page in pages for line in page) == sorted(whole) and len(set(whole)) == 25


def test_list_json_is_one_document_holding_every_record(
    cli: Cli, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operations, "LIST_CHUNK", 3)
    records = seed(redis_url, 7)[::-1]
    (doc,) = documents(ok(cli("--list", "active", "--json", "--offset", "1")).stdout)
    assert (doc["switch"], doc["list"], doc["offset"], doc["limit"], doc["count"]) == ("list", "active", 1, None, 6)
    assert [r["checksum"] for r in doc["records"]] == [r.checksum for r in records[1:]]
    first = doc["records"][0]
    assert (first["path"], first["size"], first["source"]) == (records[1].path, records[1].size, "test")


# --- flags and state changes ---------------------------------------------------------------------------------


def test_action_and_read_switch_the_flags_and_say_what_they_were(cli: Cli, redis_url: str) -> None:
    assert ok(cli("--action", "off", "-r", "off")).stdout.splitlines() == [
        "Turned action off (it was on)",
        "Turned read off (it was on)",
    ]
    assert on_store(redis_url, lambda s: s.flags()) == {Flag.ACTION: False, Flag.READ: False}
    docs = by_switch(ok(cli("-a", "on", "--json")).stdout)
    assert docs["action"] == {"switch": "action", "queue": QUEUE, "on": True, "previous": False}
    assert on_store(redis_url, lambda s: s.flags()) == {Flag.ACTION: True, Flag.READ: False}


def test_clear_forgets_every_record_but_keeps_the_flags(cli: Cli, redis_url: str) -> None:
    records = seed(redis_url, 6)
    on_store(redis_url, lambda s: s.deactivate(records[1].checksum, records[1].checksum))
    on_store(redis_url, lambda s: s.set_flag(Flag.ACTION, False))
    assert ok(cli("--clear")).stdout == "Cleared 6 records\nForgot 0 remembered done ids\n"
    summary = on_store(redis_url, lambda s: s.summary())
    assert (summary.tracked, summary.active, summary.inactive, summary.action) == (0, 0, 0, False)
    assert by_switch(ok(cli("--clear", "--json")).stdout)["clear"]["cleared"] == 0


def test_pushstr_pushes_one_record_and_ignores_a_duplicate(cli: Cli, redis_url: str) -> None:
    line = f"/data/night/1.fits {hashlib.md5(b'1').hexdigest()} 2880"
    assert ok(cli("--pushstr", line)).stdout == f"Pushed ID={hashlib.md5(b'1').hexdigest()}\n"
    assert ok(cli("--pushstr", line)).stdout == f"Ignored ID={hashlib.md5(b'1').hexdigest()}\n"
    (record,) = on_store(redis_url, lambda s: s.list_records(QueueList.ACTIVE))
    assert (record.path, record.size, record.source) == ("/data/night/1.fits", 2880, "cli")
    doc = by_switch(ok(cli("--pushstr", line, "--json")).stdout)["pushstr"]
    assert doc["pushed"] is False and doc["record"]["checksum"] == record.checksum


def test_pushfile_computes_the_checksum_and_size_and_stores_the_absolute_path(
    cli: Cli, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    content = b"SIMPLE  =                    T" * 100_000
    (tmp_path / "night.fits").write_bytes(content)
    monkeypatch.chdir(tmp_path)
    checksum = hashlib.md5(content).hexdigest()
    assert ok(cli("--pushfile", "night.fits")).stdout == f"Pushed ID={checksum}\n"
    (record,) = on_store(redis_url, lambda s: s.list_records(QueueList.ACTIVE))
    assert (record.path, record.checksum, record.size) == (str(tmp_path / "night.fits"), checksum, len(content))


# --- range moves ---------------------------------------------------------------------------------------------


def test_advance_moves_the_range_to_next_in_line_keeping_its_order(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 6)  # listed: r5 r4 r3 r2 r1 r0
    assert ok(cli("--advance", r[4].checksum, r[2].checksum)).stdout == "Advanced 3 records to next-in-line\n"
    assert ids(redis_url, QueueList.ACTIVE) == [x.checksum for x in (r[5], r[1], r[0], r[4], r[3], r[2])]


def test_deactivate_then_activate_move_a_range_between_the_lists(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 5)
    assert ok(cli("--deactivate", r[3].checksum, r[1].checksum)).stdout == "Deactivated 3 records\n"
    assert ids(redis_url, QueueList.INACTIVE) == [r[3].checksum, r[2].checksum, r[1].checksum]
    assert ok(cli("--activate", r[2].checksum, r[1].checksum)).stdout == "Activated 2 records\n"
    assert ids(redis_url, QueueList.INACTIVE) == [r[3].checksum]
    assert set(ids(redis_url, QueueList.ACTIVE)) == {r[0].checksum, r[1].checksum, r[2].checksum, r[4].checksum}


@pytest.mark.parametrize("which", ["active", "inactive"])
def test_delete_forgets_a_range_of_either_list(cli: Cli, redis_url: str, which: str) -> None:
    r = seed(redis_url, 4)
    if which == "inactive":
        on_store(redis_url, lambda s: s.deactivate(r[3].checksum, r[0].checksum))
    result = ok(cli("--delete", which, r[2].checksum, r[1].checksum))
    assert result.stdout == f"Deleted 2 records from the {which} queue\n"
    assert ids(redis_url, QueueList(which)) == [r[3].checksum, r[0].checksum]
    assert on_store(redis_url, lambda s: s.record_state(r[2].checksum)) is None


def test_redo_reactivates_every_inactive_record(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 4)
    on_store(redis_url, lambda s: s.deactivate(r[2].checksum, r[1].checksum))
    assert ok(cli("--redo")).stdout == "Reactivated 2 records\n"
    assert ids(redis_url, QueueList.INACTIVE) == [] and len(ids(redis_url, QueueList.ACTIVE)) == 4


def test_range_moves_report_json_documents(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 4)
    docs = documents(ok(cli("--json", "--advance", r[1].checksum, r[1].checksum, "--delete", "active",
                            r[3].checksum, r[3].checksum, "--redo")).stdout)
    assert docs == [
        {"switch": "advance", "queue": QUEUE, "moved": 1, "first": r[1].checksum, "last": r[1].checksum},
        {"switch": "delete", "queue": QUEUE, "moved": 1, "first": r[3].checksum, "last": r[3].checksum,
         "list": "active"},
        {"switch": "redo", "queue": QUEUE, "moved": 0},
    ]


# --- workers, events, health ---------------------------------------------------------------------------------


def test_workers_shows_host_pid_since_heartbeat_and_counts(cli: Cli, redis_url: str) -> None:
    register(redis_url)
    register(redis_url, "host-2:1:pop:dead00", ttl=0.01)
    time.sleep(0.05)
    header, alive, dead = ok(cli("--workers")).stdout.splitlines()
    assert header.split() == ["WORKER", "HOST", "PID", "SINCE", "HEARTBEAT", "DONE", "FAILED", "RUNNING"]
    assert alive.startswith(WORKER) and "host-1" in alive and "4242" in alive and "s ago" in alive
    assert alive.split()[-3:] == ["7", "1", "2"]
    assert dead.startswith("host-2:1:pop:dead00") and "expired" in dead
    docs = by_switch(ok(cli("--workers", "--json")).stdout)["workers"]["workers"]
    first = docs[0]
    assert (first["worker"], first["host"], first["pid"], first["alive"]) == (WORKER, "host-1", 4242, True)
    assert (first["done"], first["failed"], first["running"]) == (7, 1, 2)
    assert 0 <= first["heartbeat_age"] < 30 and first["since"] < time.time() - 59
    assert docs[1]["alive"] is False and docs[1]["heartbeat_age"] is None


def test_workers_says_when_no_worker_is_registered(cli: Cli) -> None:
    assert ok(cli("--workers")).stdout == f"No worker is registered for queue {QUEUE}\n"


def test_events_shows_the_last_n_events_oldest_first(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 30)
    lines = ok(cli("--events", "3")).stdout.splitlines()
    assert [line.split()[2:4] for line in lines] == [["pushed", x.checksum] for x in r[27:]]
    assert len(ok(cli("--events")).stdout.splitlines()) == operations.DEFAULT_EVENTS
    events = by_switch(ok(cli("--events", "2", "--json")).stdout)["events"]["events"]
    assert [(e["kind"], e["record"]) for e in events] == [("pushed", r[28].checksum), ("pushed", r[29].checksum)]
    assert set(events[0]) == {"id", "time", "kind", "record", "detail"}


def test_health_is_ok_when_every_registered_daemon_has_a_fresh_heartbeat(cli: Cli, redis_url: str) -> None:
    register(redis_url)
    assert ok(cli("--health")).stdout == f"OK: Redis answers; 1 daemon is alive for queue {QUEUE}\n"
    doc = by_switch(ok(cli("--health", "--json")).stdout)["health"]
    assert (doc["healthy"], doc["alive"], doc["registered"]) == (True, 1, 1)


def test_health_fails_when_no_daemon_is_registered(cli: Cli) -> None:
    result = cli("--health")
    assert result.exit_code == 1
    assert result.stdout == f"UNHEALTHY: no daemon is running for queue {QUEUE}\n"


def test_health_fails_when_a_daemon_heartbeat_has_expired(cli: Cli, redis_url: str) -> None:
    register(redis_url)
    register(redis_url, "host-2:1:pop:dead00", ttl=0.01)
    time.sleep(0.05)
    result = cli("--health", "--json")
    assert result.exit_code == 1
    doc = by_switch(result.stdout)["health"]
    assert doc["healthy"] is False and "host-2:1:pop:dead00" in doc["reason"]
    assert (doc["alive"], doc["registered"]) == (1, 2)


# --- queues and combinations ---------------------------------------------------------------------------------


def test_queue_option_addresses_another_configured_queue(cli: Cli, redis_url: str) -> None:
    seed(redis_url, 2, queue=OTHER_QUEUE)
    assert ok(cli("--queue", OTHER_QUEUE, "--clear")).stdout.splitlines()[0] == "Cleared 2 records"
    assert ok(cli("--clear")).stdout.splitlines()[0] == "Cleared 0 records"


def test_all_switches_in_one_call_run_in_the_fixed_order_whatever_their_order(
    cli: Cli, redis_url: str, tmp_path: Path
) -> None:
    r = seed(redis_url, 5)  # listed: r4 r3 r2 r1 r0
    on_store(redis_url, lambda s: s.deactivate(r[4].checksum, r[4].checksum))
    register(redis_url)
    loaded, pushed = make_records(2, start=100)
    (tmp_path / "more.txt").write_text(format_line(loaded) + "\n")
    dump = tmp_path / "dump.txt"
    # Given last-first: each step only succeeds if the ones before it in the fixed order have run.
    result = ok(cli(
        "--json", "--summary", "--health", "--info", "--workers", "--events", "1", "--list", "active",
        "--dump", str(dump), "--redo", "--delete", "active", r[3].checksum, r[3].checksum,
        "--activate", r[4].checksum, r[4].checksum, "--deactivate", r[0].checksum, r[0].checksum,
        "--advance", pushed.checksum, r[2].checksum, "--load", str(tmp_path / "more.txt"),
        "--pushstr", format_line(pushed), "--read", "off", "--action", "off",
    ))
    docs = documents(result.stdout)
    assert [d["switch"] for d in docs] == [
        "action", "read", "pushstr", "load", "advance", "deactivate", "activate", "delete", "redo",
        "dump", "list", "events", "workers", "info", "health", "summary",
    ]
    switch = {d["switch"]: d for d in docs}
    assert switch["advance"]["moved"] == 3  # pushed r3 r2: the pushed record was there before the move
    assert switch["redo"]["moved"] == 1  # r0, deactivated earlier in the same call
    # active was r3 r2 r1 r0; then P r3 r2 r1 r0; L P r3 r2 r1 r0; L r1 r0 P r3 r2 (advance);
    # L r1 P r3 r2 (deactivate r0); r4 L r1 P r3 r2 (activate); r4 L r1 P r2 (delete r3); r0 r4 L r1 P r2 (redo).
    expected = [r[0], r[4], loaded, r[1], pushed, r[2]]
    assert [x["checksum"] for x in switch["list"]["records"]] == [x.checksum for x in expected]
    assert dump.read_text().splitlines() == [format_line(x) for x in reversed(expected)]  # next to run first
    assert switch["events"]["events"][0]["kind"] == "activated"
    assert switch["health"]["healthy"] is True
    summary = switch["summary"]
    assert (summary["action"], summary["read"], summary["active"], summary["inactive"]) == (False, False, 6, 0)


def test_combined_switches_print_human_text_in_the_fixed_order(cli: Cli, redis_url: str) -> None:
    r = seed(redis_url, 2)
    lines = ok(cli("-s", "-l", "active", "--advance", r[1].checksum, r[1].checksum, "-a", "off")).stdout.splitlines()
    assert lines[:4] == [
        "Turned action off (it was on)",
        "Advanced 1 records to next-in-line",
        *listed([r[0], r[1]]),
    ]
    assert lines[4] == f"Queue {QUEUE}"


def test_clear_runs_before_the_pushes_of_the_same_call(cli: Cli, redis_url: str) -> None:
    seed(redis_url, 3)
    (pushed,) = make_records(1, start=50)
    assert ok(cli("--pushstr", format_line(pushed), "--clear")).stdout.splitlines() == [
        "Cleared 3 records",
        "Forgot 0 remembered done ids",
        f"Pushed ID={pushed.checksum}",
    ]
    assert ids(redis_url, QueueList.ACTIVE) == [pushed.checksum]
