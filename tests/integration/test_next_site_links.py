"""Hand-ons and receipts queries over kept, pipelined links to the next sites (``dataq.nextsite``), against real
push daemons on loopback (and, for a peer that misbehaves on purpose, a scripted one)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from dataq.actions.handon import HandOn
from dataq.custody.client import ask_over
from dataq.custody.receipts import ReceiptKind
from dataq.errors import NOT_REPLICATED_PREFIX, ActionError, Retryable
from dataq.handshake import PeerBook, hello_line, is_hello
from dataq.nextsite import LinkLost, SiteLink
from dataq.record import Record, handon_line
from dataq.store import QueueList, QueueStore
from testbed.link import reached
from tests.actions_support import peer_server
from tests.push_support import QUEUE, RunningPush, push_settings, start_push

LOOPBACK = "127.0.0.1"


def records(count: int, prefix: str = "f") -> list[Record]:
    return [Record(f"/valley/data/{prefix}{n:05d}.fits", hashlib.md5(f"{prefix}{n}".encode()).hexdigest(), 1000 + n)
            for n in range(count)]


@contextlib.asynccontextmanager
async def hand_on(*sites: str, timeout: float = 2.0) -> AsyncIterator[HandOn]:
    handon = HandOn(sites, timeout=timeout, spool=None, tls=(None, None, None), site="mountain")
    await handon.start()
    try:
        yield handon
    finally:
        await handon.close(1.0)


@pytest.fixture
async def next_queue(redis_url: str) -> AsyncIterator[QueueStore]:
    store = QueueStore.from_url(redis_url, QUEUE)
    yield store
    await store.close()


@pytest.fixture
async def next_site(redis_url: str, tmp_path: Path) -> AsyncIterator[RunningPush]:
    running = await start_push(push_settings(redis_url, tmp_path / "next-data"))
    yield running
    await running.shutdown()


async def queued_ids(queue: QueueStore) -> list[str]:
    return [record.checksum for record in await queue.list_records(QueueList.ACTIVE)]


async def test_the_hand_ons_of_a_batch_and_their_receipts_queries_share_one_connection(
        next_site: RunningPush, next_queue: QueueStore) -> None:
    site = f"{LOOPBACK}:{next_site.port}"
    batch = records(300)
    async with hand_on(site) as handon:
        taken = await asyncio.gather(*(handon(record, record.path) for record in batch))
        assert taken == [site] * len(batch)
        assert sorted(await queued_ids(next_queue)) == sorted(record.id for record in batch)
        assert handon.next_sites is not None
        receipts = await ask_over(handon.next_sites, site, [record.id for record in batch], site="mountain",
                                  within=5.0)
        assert [receipt.record_id for receipt in receipts] == [record.id for record in batch]
        assert {receipt.kind for receipt in receipts} == {ReceiptKind.PENDING}
        assert handon.next_sites.link(site).connections == 1, "one connection, greeted once, carried it all"


async def test_a_next_site_restarted_mid_batch_ends_with_every_record_queued_there_once(
        redis_url: str, tmp_path: Path, next_queue: QueueStore) -> None:
    running = await start_push(push_settings(redis_url, tmp_path / "next-data"))
    port = running.port
    site = f"{LOOPBACK}:{port}"
    batch = records(5000)
    async with hand_on(site, timeout=5.0) as handon:
        offers = [asyncio.create_task(handon(record, record.path)) for record in batch]
        await asyncio.wait(offers, return_when=asyncio.FIRST_COMPLETED)
        await running.shutdown()
        restarted = await start_push(push_settings(redis_url, tmp_path / "next-data", port=port))
        outcomes = await asyncio.gather(*offers, return_exceptions=True)
        assert not [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, Retryable)]
        # What the outage held up runs again, as the pop daemon runs a record whose hand-on was Retryable: after
        # a while, until the next site takes it.
        again = [record for record, outcome in zip(batch, outcomes, strict=True) if isinstance(outcome, Retryable)]
        for _ in range(100):
            if not again:
                break
            await asyncio.sleep(0.2)
            outcomes = await asyncio.gather(*(handon(record, record.path) for record in again),
                                            return_exceptions=True)
            assert not [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, Retryable)]
            again = [record for record, outcome in zip(again, outcomes, strict=True) if isinstance(outcome, Retryable)]
        assert not again
        assert handon.next_sites is not None and handon.next_sites.link(site).connections >= 2
    await restarted.shutdown()
    queued = await queued_ids(next_queue)
    assert len(queued) == len(set(queued)) == len(batch), "every record queued there, none twice"


class ScriptedPeer:
    """A push daemon that greets, then answers each record line as ``answer(n, line)`` says (n counts the record
    lines of all its connections); ``None`` drops the connection there."""

    def __init__(self, answer: Callable[[int, bytes], bytes | None]) -> None:
        self.answer, self.lines, self.connections = answer, 0, 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while line := await reader.readline():
            if is_hello(line):
                writer.write(hello_line())
                continue
            reply = self.answer(self.lines, line)
            self.lines += 1
            if reply is None:
                return
            writer.write(reply)


@contextlib.asynccontextmanager
async def scripted(answer: Callable[[int, bytes], bytes | None],
                   link: tuple[float, float | None] | None = None) -> AsyncIterator[tuple[ScriptedPeer, str]]:
    """A :class:`ScriptedPeer` serving on loopback, and the ``host:port`` it is reached at: through the testbed's
    long link (one-way delay, Mbit/s) when one is given."""
    peer = ScriptedPeer(answer)
    async with peer_server(peer.serve) as port:
        with contextlib.ExitStack() as links:
            yield peer, f"{LOOPBACK}:{reached(port, link, links)}"


LINKS = {"loopback": None, "long link": (0.02, None)}
"""The peer as it is, and a round trip of 40 ms away (with one more for each new connection): the answers of a
pipelined batch then come back while later records of it are still on their way."""


def checksum_of(line: bytes) -> str:
    return line.split(b'"checksum": "')[1][:32].decode()


@pytest.mark.parametrize("link", LINKS.values(), ids=LINKS)
async def test_a_next_site_that_refuses_records_midway_fails_those_alone(
        link: tuple[float, float | None] | None) -> None:
    def answer(n: int, line: bytes) -> bytes:
        return b"Error: refused by the test\n" if n % 3 == 1 else f"Pushed ID={checksum_of(line)}\n".encode()

    async with scripted(answer, link) as (peer, site), hand_on(site) as handon:
        batch = records(90)
        outcomes = await asyncio.gather(*(handon(record, record.path) for record in batch), return_exceptions=True)
    refused = [outcome for outcome in outcomes if isinstance(outcome, ActionError)]
    assert len(refused) == 30 and all("refused the record: refused by the test" in str(e) for e in refused)
    assert outcomes.count(site) == 60
    assert peer.connections == 1


@pytest.mark.parametrize("link", LINKS.values(), ids=LINKS)
async def test_a_connection_dropped_midway_sends_what_was_unanswered_again_on_a_new_one(
        link: tuple[float, float | None] | None) -> None:
    seen: set[str] = set()

    def answer(n: int, line: bytes) -> bytes | None:
        if n == 50:
            return None  # the connection drops with the rest of the batch unanswered
        checksum = checksum_of(line)
        word = "Ignored" if checksum in seen else "Pushed"
        seen.add(checksum)
        return f"{word} ID={checksum}\n".encode()

    async with scripted(answer, link) as (peer, site), hand_on(site) as handon:
        batch = records(200)
        outcomes = await asyncio.gather(*(handon(record, record.path) for record in batch))
    assert outcomes == [site] * len(batch)
    assert seen == {record.id for record in batch}
    assert peer.connections == 2


async def test_a_next_site_that_cannot_be_reached_is_skipped_for_a_while_then_tried_again(
        next_site: RunningPush, next_queue: QueueStore) -> None:
    from dataq.embedded.redis_server import free_port

    down, up = f"{LOOPBACK}:{free_port()}", f"{LOOPBACK}:{next_site.port}"
    async with hand_on(down, up) as handon:
        first, second = records(2)
        assert await handon(first, first.path) == up
        assert handon.next_sites is not None
        # The second hand-on does not try the site that was just found away: no second connection attempt.
        failed_at = handon.next_sites.link(down).failed_at
        assert await handon(second, second.path) == up
        assert handon.next_sites.link(down).failed_at == failed_at
        assert "cannot connect" in (handon.next_sites.link(down).last_error or "")


async def test_a_lone_next_site_that_is_away_makes_the_hand_on_an_outage() -> None:
    from dataq.embedded.redis_server import free_port

    down = f"{LOOPBACK}:{free_port()}"
    async with hand_on(down, timeout=0.5) as handon:
        (record,) = records(1)
        with pytest.raises(Retryable, match=f"no next site took the record: {down}: cannot connect"):
            await handon(record, record.path)
        # Within its cool-down it is not tried again, and the reason says so.
        with pytest.raises(Retryable, match="tried again in"):
            await handon(replace(record), record.path)


async def test_a_request_that_cannot_be_composed_fails_alone_and_the_link_serves_the_next_one(
        next_site: RunningPush, next_queue: QueueStore) -> None:
    site = f"{LOOPBACK}:{next_site.port}"
    async with hand_on(site) as handon:
        assert handon.next_sites is not None
        link = handon.next_sites.link(site)

        def broken(greeting: object) -> bytes:
            raise ValueError("a bug")

        with pytest.raises(ValueError, match="a bug"):
            await asyncio.wait_for(link.request(broken, 1), 10)
        (record,) = records(1)
        assert await handon(record, record.path) == site


async def test_a_peer_that_falls_silent_after_a_quiet_spell_is_left_within_its_timeout() -> None:
    def answer(n: int, line: bytes) -> bytes:
        return f"Pushed ID={checksum_of(line)}\n".encode() if n == 0 else b""  # then nothing, ever

    async with scripted(answer) as (_, site):
        host, port = site.split(":")
        link = SiteLink(host, int(port), tls=None, timeout=0.5, peer=PeerBook()[site])
        first, second = records(2)
        await link.request(lambda greeting: (handon_line(first, "mountain") + "\n").encode(), 1)
        await asyncio.sleep(0.2)  # nothing in flight: the next read begins without a deadline
        with pytest.raises(LinkLost, match=r"no answer within 0\.5 s"):
            await asyncio.wait_for(link.request(lambda greeting: (handon_line(second, "mountain") + "\n").encode(),
                                                1), 10)
        await link.close()


async def test_an_answer_naming_another_record_is_never_taken_for_the_hand_on() -> None:
    def answer(n: int, line: bytes) -> bytes:
        return b"Pushed ID=" + b"0" * 32 + b"\n"

    async with scripted(answer) as (_, site), hand_on(site) as handon:
        (record,) = records(1)
        with pytest.raises(Retryable, match="names another record"):
            await handon(record, record.path)


async def test_a_next_site_that_cannot_confirm_its_replicas_in_time_is_an_outage_not_a_refusal() -> None:
    def answer(n: int, line: bytes) -> bytes:
        return f"Error: {NOT_REPLICATED_PREFIX}1 replica(s) within 1 s\n".encode()

    async with scripted(answer) as (peer, site), hand_on(site, timeout=0.3) as handon:
        (record,) = records(1)
        with pytest.raises(Retryable, match="could not confirm the record in time"):
            await handon(record, record.path)
    assert peer.lines > 1, "sent again while the next site asked for it"
