"""Audit questions passed on along the chain: a site asks only its next site, which asks its own next site and
answers with its own state followed by theirs, so the asking site learns where each file is to the end of the
chain without reaching any site but its next."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from dataq.actions import storing
from dataq.audit.arrived import parse_answer as parse_arrived
from dataq.audit.arrived import question_line as arrived_question
from dataq.audit.chain import Ask, Ends, arrived_asker, asker, walk
from dataq.audit.questions import Answer, CopyState, Silent, SiteState, parse_answers
from dataq.config import QueueSettings
from dataq.embedded.redis_server import EmbeddedRedis
from dataq.handshake import Capability, hello_line
from dataq.record import Record
from dataq.store import QueueStore
from tests.actions_support import empty_root, make_file
from tests.push_support import LOOPBACK, QUEUE, RunningPush, push_settings, start_push

MakeRedis = Callable[..., EmbeddedRedis]


@dataclasses.dataclass
class Chain:
    """A valley and an archive, each with its own Redis; the valley hands on to the archive."""

    valley: RunningPush
    archive: RunningPush
    valley_store: QueueStore
    archive_store: QueueStore
    root: Path

    @property
    def valley_address(self) -> str:
        return f"{LOOPBACK}:{self.valley.port}"

    @property
    def archive_address(self) -> str:
        return f"{LOOPBACK}:{self.archive.port}"


@pytest.fixture
async def chain(make_redis: MakeRedis, tmp_path: Path) -> AsyncIterator[Chain]:
    archive_redis, valley_redis = make_redis(), make_redis()
    root = empty_root(tmp_path)
    archive_settings = push_settings(archive_redis.url, tmp_path / "archive-data")
    archive = await start_push(dataclasses.replace(archive_settings, site="archive", queues={
        QUEUE: QueueSettings(QUEUE, actions=("disk_store",), action_options={"disk_store": {"root": str(root)}})}))
    valley_settings = push_settings(valley_redis.url, tmp_path / "valley-data")
    valley = await start_push(dataclasses.replace(valley_settings, site="valley", queues={
        QUEUE: QueueSettings(QUEUE, actions=("network_move",), action_options={"network_move": {
            "destination": str(tmp_path / "to-archive"), "next_sites": [f"{LOOPBACK}:{archive.port}"],
            "next_path": str(tmp_path / "incoming/{name}")}})}))
    stores = QueueStore.from_url(valley_redis.url, QUEUE), QueueStore.from_url(archive_redis.url, QUEUE)
    try:
        yield Chain(valley, archive, *stores, root)
    finally:
        for store in stores:
            await store.close()
        for daemon in (valley, archive):
            if not daemon.task.done():
                await daemon.shutdown()


def recording(ask: Ask, asked: list[str]) -> Ask:
    """``ask``, noting each address it asks."""
    async def noted(address: str, ids: list[str]) -> list[Answer]:
        asked.append(address)
        return await ask(address, ids)

    return noted


async def done_at(store: QueueStore, records: list[Record]) -> None:
    await store.push_batch(records, source="test")
    await store.heartbeat("pop", {"role": "pop"}, {"running": 0}, 30.0)
    claimed = (await store.claim("pop", len(records))).records
    assert all(await store.ack("pop", [(record.checksum, "") for record in claimed]))


async def test_the_next_site_passes_the_question_on_and_answers_with_the_archives_answer(
        chain: Chain, tmp_path: Path) -> None:
    arrived, waiting, never = [make_file(tmp_path / "mountain", f"{n}.fits", b"frame %d " % n * 50)
                               for n in range(3)]
    storing.store_batch_sync([(arrived, "0.fits")], str(chain.root))
    await done_at(chain.valley_store, [arrived])
    await done_at(chain.archive_store, [arrived])
    await chain.valley_store.push_batch([waiting], source="mountain")

    asked: list[str] = []
    first = {record.checksum: Answer(record.checksum, SiteState.CUSTODY, "mountain", (chain.valley_address,))
             for record in (arrived, waiting, never)}
    journeys = await walk(first, recording(asker("mountain", None, 5.0), asked))

    assert asked == [chain.valley_address], "the mountain asks its next site only"
    sites = {record_id: [hop.site for hop in hops] for record_id, hops in journeys.items()}
    assert sites[arrived.checksum] == ["mountain", "valley", "archive"]
    (_, valley, archive) = journeys[arrived.checksum]
    assert isinstance(valley, Answer) and valley.state is SiteState.DONE
    assert valley.next_sites == (chain.archive_address,)
    assert isinstance(archive, Answer) and (archive.state, archive.copy) == (SiteState.DONE, CopyState.PRESENT)
    assert [hop.state for hop in journeys[waiting.checksum][1:] if isinstance(hop, Answer)] == \
        [SiteState.QUEUED, SiteState.UNKNOWN]
    assert [hop.state for hop in journeys[never.checksum][1:] if isinstance(hop, Answer)] == \
        [SiteState.UNKNOWN, SiteState.UNKNOWN]


async def test_a_site_after_the_next_that_does_not_answer_is_said_silent_by_the_next(
        chain: Chain, tmp_path: Path) -> None:
    record = make_file(tmp_path / "mountain", "a.fits", b"a frame " * 50)
    await done_at(chain.valley_store, [record])
    await chain.archive.shutdown()

    asked: list[str] = []
    first = {record.checksum: Answer(record.checksum, SiteState.CUSTODY, "mountain", (chain.valley_address,))}
    (journey,) = (await walk(first, recording(asker("mountain", None, 5.0), asked))).values()

    assert asked == [chain.valley_address]
    assert [type(hop) for hop in journey] == [Answer, Answer, Silent]
    silent = journey[-1]
    assert isinstance(silent, Silent) and silent.site == chain.archive_address and not silent.older


async def test_the_lines_before_a_passed_on_question_are_answered_first_and_nothing_else_follows_it(
        chain: Chain, tmp_path: Path) -> None:
    record = make_file(tmp_path / "mountain", "b.fits", b"b frame " * 50)
    reader, writer = await asyncio.open_connection(LOOPBACK, chain.valley.port)
    try:
        question = b'{"audit": ["%s"], "site": "mountain", "forward": 3, "within": 5}\n' % record.checksum.encode()
        writer.write(f"{record.path} {record.checksum} {record.size}\n".encode() + question
                     + f"{record.path}.2 {'1' * 32} 7\n".encode())
        await writer.drain()
        lines = [await asyncio.wait_for(reader.readline(), 10) for _ in range(3)]
    finally:
        writer.close()
    assert lines[0] == f"Pushed ID={record.checksum}\n".encode()
    (answer,) = parse_answers([lines[1]], [record.checksum])
    assert (answer.state, answer.site) == (SiteState.QUEUED, "valley"), "it answers for the record pushed before"
    assert [hop.site for hop in answer.further] == ["archive"]
    assert lines[2].startswith(b"Error: audit: this connection passes audit questions on")
    assert await chain.valley_store.whereabouts(["1" * 32], 5) == [None], "the record after it was not pushed"


@pytest.mark.parametrize(("field", "error"), [
    (b'"forward": -1', b"'forward' must be a whole number of sites"),
    (b'"forward": "all"', b"'forward' must be a whole number of sites"),
    (b'"within": 0', b"'within' must be a positive number of seconds"),
    (b'"hops": 2', b"unknown key 'hops'"),
])
async def test_a_malformed_passed_on_question_is_refused_with_why(chain: Chain, field: bytes, error: bytes) -> None:
    reader, writer = await asyncio.open_connection(LOOPBACK, chain.valley.port)
    try:
        writer.write(b'{"audit": ["' + b"0" * 32 + b'"], ' + field + b"}\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()
    assert line.startswith(b"Error: audit: ") and error in line



async def test_past_a_next_site_that_does_not_pass_questions_on_the_asker_goes_on_itself(
        chain: Chain, tmp_path: Path) -> None:
    record = make_file(tmp_path / "mountain", "c.fits", b"c frame " * 50)
    storing.store_batch_sync([(record, "c.fits")], str(chain.root))
    await done_at(chain.archive_store, [record])
    questions: list[dict[str, object]] = []

    async def answers_for_itself(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A site that answers audit questions (its hello names audit) but does not pass them on."""
        await reader.readline()  # the asker's hello
        writer.write(hello_line(frozenset({Capability.AUDIT})))
        while line := await reader.readline():
            question = json.loads(line)
            questions.append(question)
            for record_id in question["audit"]:
                writer.write(Answer(record_id, SiteState.DONE, "older-valley", (chain.archive_address,)).line()
                             .encode())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answers_for_itself, LOOPBACK, 0)
    older = f"{LOOPBACK}:{server.sockets[0].getsockname()[1]}"
    try:
        asked: list[str] = []
        first = {record.checksum: Answer(record.checksum, SiteState.CUSTODY, "mountain", (older,))}
        (journey,) = (await walk(first, recording(asker("mountain", None, 5.0), asked))).values()
    finally:
        server.close()
        await server.wait_closed()
    assert asked == [older, chain.archive_address], "the asker itself asks the site after"
    assert all("forward" not in question and "within" not in question for question in questions)
    assert [hop.site for hop in journey] == ["mountain", "older-valley", "archive"]


async def ask_arrived_lines(port: int, lines: bytes, answers: int) -> list[bytes]:
    """The answer lines to ``lines`` written on a fresh connection to the push daemon at ``port``."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    try:
        writer.write(lines)
        await writer.drain()
        return [await asyncio.wait_for(reader.readline(), 10) for _ in range(answers)]
    finally:
        writer.close()


async def test_the_end_of_the_chain_marks_each_id_it_holds_a_copy_of_in_one_line(
        chain: Chain, tmp_path: Path) -> None:
    there, missing, corrupt, unstored = [make_file(tmp_path / "mountain", f"{n}.fits", b"frame %d " % n * 50)
                                        for n in range(4)]
    storing.store_batch_sync([(record, f"{n}.fits") for n, record in enumerate((there, missing, corrupt))],
                             str(chain.root))
    (chain.root / "1.fits").unlink()
    (chain.root / "2.fits").write_bytes(b"shorter")
    ids = [there.checksum, missing.checksum, corrupt.checksum, unstored.checksum, "not-an-id"]

    (answer,) = await ask_arrived_lines(chain.archive.port, arrived_question(ids, "mountain"), 1)
    assert parse_arrived(answer, len(ids)) == ("1000-", "archive")

    (answer,) = await ask_arrived_lines(chain.valley.port, arrived_question(ids, "mountain"), 1)
    assert parse_arrived(answer, len(ids)) == ("0000-", "valley"), "a site that hands records on is no end"


async def test_the_records_before_a_arrived_question_are_answered_first_and_then_only_questions(
        chain: Chain, tmp_path: Path) -> None:
    record = make_file(tmp_path / "mountain", "d.fits", b"d frame " * 50)
    lines = await ask_arrived_lines(chain.archive.port, f"{record.path} {record.checksum} {record.size}\n".encode()
                                 + arrived_question([record.checksum], "mountain")
                                 + f"{record.path}.2 {'2' * 32} 7\n".encode(), 3)
    assert lines[0] == f"Pushed ID={record.checksum}\n".encode()
    assert parse_arrived(lines[1], 1) == ("0", "archive"), "queued there, no copy stored yet"
    assert lines[2].startswith(b"Error: audit: this connection passes audit questions on")


@pytest.mark.parametrize(("line", "error"), [
    (b'{"arrived": "abc"}\n', b"Error: arrived: 'arrived' must be a list of ids"),
    (b'{"arrived": [], "hops": 2}\n', b"Error: arrived: unknown key 'hops'"),
    (b'{"arrived": ' + json.dumps(["0" * 32] * 1001).encode() + b"}\n", b"Error: arrived: 1001 ids in one line"),
])
async def test_a_malformed_arrived_question_is_refused_with_why(chain: Chain, line: bytes, error: bytes) -> None:
    (answer,) = await ask_arrived_lines(chain.archive.port, line, 1)
    assert answer.startswith(error)


async def test_the_end_is_asked_which_files_it_holds_and_an_older_end_the_full_question(
        chain: Chain, tmp_path: Path) -> None:
    stored_there, elsewhere = [make_file(tmp_path / "mountain", f"e{n}.fits", b"e frame %d " % n * 50)
                               for n in range(2)]
    storing.store_batch_sync([(stored_there, "e0.fits")], str(chain.root))
    await done_at(chain.archive_store, [stored_there])
    ids = [stored_there.checksum, elsewhere.checksum]

    ends = Ends(arrived_asker("mountain", None, 5.0))
    ends.addresses = (chain.archive_address,)
    found = await ends.arrived(ids, asker("mountain", None, 5.0))
    assert list(found) == [stored_there.checksum]
    assert (found[stored_there.checksum].site, found[stored_there.checksum].copy) == ("archive", CopyState.PRESENT)
    assert ends.arrived_ask is not None

    questions: list[dict[str, object]] = []

    async def speaks_audit_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """An end older than arrived questions: its hello names audit, and it answers each id in full."""
        await reader.readline()
        writer.write(hello_line(frozenset({Capability.AUDIT})))
        while line := await reader.readline():
            question = json.loads(line)
            questions.append(question)
            for record_id in question["audit"]:
                copy = CopyState.PRESENT if record_id == stored_there.checksum else None
                writer.write(Answer(record_id, SiteState.DONE if copy else SiteState.UNKNOWN, "older-archive",
                                    copy=copy).line().encode())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(speaks_audit_only, LOOPBACK, 0)
    try:
        older = Ends(arrived_asker("mountain", None, 5.0))
        older.addresses = (f"{LOOPBACK}:{server.sockets[0].getsockname()[1]}",)
        found = await older.arrived(ids, asker("mountain", None, 5.0))
    finally:
        server.close()
        await server.wait_closed()
    assert list(found) == [stored_there.checksum] and found[stored_there.checksum].site == "older-archive"
    assert [question["audit"] for question in questions] == [ids], "asked in full, as before arrived questions"
    assert older.arrived_ask is None, "and never asked an arrived question again"
