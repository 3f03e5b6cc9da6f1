"""The Feeder library against a real push daemon: windows, outcomes in order, reconnection, concurrency."""

from __future__ import annotations

import asyncio
import hashlib
import io
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataq.feed.client import Feeder, FeedError
from dataq.feed.command import feed_command
from dataq.feed.sources import read_record_file, scan_tree
from dataq.protocol import Reply, ReplyKind
from dataq.record import DEFAULT_RULES, format_line
from dataq.store import QueueStore
from tests.helpers import make_records
from tests.push_support import (
    StartPush,
    active_ids,
)


@pytest.mark.parametrize("window", [1, 7, 1000])
async def test_every_item_gets_its_reply_in_input_order_whatever_the_window(
    push_daemon: StartPush, window: int
) -> None:
    daemon = await push_daemon()
    records = make_records(300)
    items: list[object] = [*records[:100], "relative x 1", *records[100:], records[5], "a\nb", *records[:1]]
    replies: list[tuple[int, Reply]] = []
    feeder = Feeder(daemon.host, daemon.port, window=window, on_reply=lambda i, r: replies.append((i, r)))
    result = await feeder.feed(items)  # type: ignore[arg-type]
    assert result.replies is not None
    kinds = [reply.kind for reply in result.replies]
    assert kinds == [ReplyKind.PUSHED] * 100 + [ReplyKind.ERROR] + [ReplyKind.PUSHED] * 200 + [
        ReplyKind.IGNORED, ReplyKind.ERROR, ReplyKind.IGNORED]
    assert "not absolute" in result.replies[100].detail
    assert "newline" in result.replies[302].detail  # refused before sending: it would split into two lines
    assert [r.detail for r in result.replies[101:301]] == [r.checksum for r in records[100:]]
    assert (result.pushed, result.ignored, result.errors) == (300, 2, 2)
    assert sorted(i for i, _ in replies) == list(range(len(items)))


async def test_an_async_source_may_give_items_in_lists_each_answered_in_its_place(push_daemon: StartPush) -> None:
    daemon = await push_daemon()
    records = make_records(250)

    async def source() -> AsyncIterator[object]:
        yield records[0]
        yield list(records[1:200])  # a spool's batch, as the forwarder gives it
        yield ["relative x 1", records[200], "a\nb"]  # refused ones keep their places inside a list
        yield []
        yield list(records[201:])

    replies: list[tuple[int, Reply]] = []
    feeder = Feeder(daemon.host, daemon.port, window=64, on_reply=lambda i, r: replies.append((i, r)))
    result = await feeder.feed(source())  # type: ignore[arg-type]
    assert result.replies is not None
    kinds = [reply.kind for reply in result.replies]
    assert kinds == [ReplyKind.PUSHED] * 200 + [ReplyKind.ERROR, ReplyKind.PUSHED, ReplyKind.ERROR] + \
        [ReplyKind.PUSHED] * 49
    assert [r.detail for r in result.replies[201:202] + result.replies[203:]] == [r.checksum for r in records[200:]]
    assert sorted(i for i, _ in replies) == list(range(252))


async def test_concurrent_feeders_with_overlapping_records_push_each_id_exactly_once(
    push_daemon: StartPush, store: QueueStore
) -> None:
    daemon = await push_daemon(batch_max=100)
    records = make_records(2000)
    slices = [records[0:1200], records[800:2000], records[400:1600], records[::-1]]
    feeders = [Feeder(daemon.host, daemon.port, window=50, keep_replies=False) for _ in slices]  # counts only
    results = await asyncio.gather(*(feeder.feed(s) for feeder, s in zip(feeders, slices, strict=True)))
    assert sum(result.pushed for result in results) == len(records)
    assert sum(result.ignored for result in results) == sum(len(s) for s in slices) - len(records)
    assert all(result.errors == 0 for result in results)
    stored = await active_ids(store)
    assert len(stored) == len(set(stored)) == len(records)


async def test_the_feeder_reconnects_and_resends_what_was_not_answered_when_the_daemon_restarts(
    push_daemon: StartPush, store: QueueStore
) -> None:
    first = await push_daemon()
    records = make_records(2000)
    halfway = asyncio.Event()

    async def paced() -> AsyncIterator[str]:
        for index, record in enumerate(records):
            if index == 1000:
                halfway.set()
            if index % 50 == 0:
                await asyncio.sleep(0.005)
            yield format_line(record)

    feeding = asyncio.create_task(Feeder(first.host, first.port, window=100).feed(paced()))
    await halfway.wait()
    await first.shutdown()
    await push_daemon(port=first.port)
    result = await asyncio.wait_for(feeding, 30)
    assert result.reconnects >= 1 and result.errors == 0
    assert result.pushed + result.ignored == len(records)
    stored = await active_ids(store)
    assert len(stored) == len(set(stored)) == len(records)


async def test_the_feeder_gives_up_when_no_daemon_listens_for_longer_than_it_retries() -> None:
    from dataq.embedded.redis_server import free_port

    with pytest.raises(FeedError, match="cannot reach the push daemon"):
        await Feeder("127.0.0.1", free_port(), retry_for=0.3).feed(make_records(1))


async def test_scanning_a_tree_yields_each_regular_file_with_its_md5_and_size(tmp_path: Path) -> None:
    (tmp_path / "night 1").mkdir()
    files = {tmp_path / "a.fits": b"abc", tmp_path / "night 1" / "b.fits": b"x" * 3_000_000, tmp_path / "e": b""}
    for path, content in files.items():
        path.write_bytes(content)
    (tmp_path / "link").symlink_to(tmp_path / "a.fits")
    found = {origin: outcome async for origin, outcome in scan_tree(str(tmp_path), workers=2)}
    assert set(found) == {str(path) for path in files}
    for path, content in files.items():
        record = found[str(path)]
        assert not isinstance(record, str)
        assert (record.checksum, record.size) == (hashlib.md5(content).hexdigest(), len(content))


async def test_a_large_file_holds_up_no_small_file_behind_it_in_a_scan(tmp_path: Path) -> None:
    large = tmp_path / "a-large.fits"  # first in path order
    with large.open("wb") as out:
        out.truncate(512 << 20)  # sparse: half a second of md5 without a disk
    small = [tmp_path / f"b{n}.fits" for n in range(8)]
    for path in small:
        path.write_bytes(path.name.encode())
    order = [origin async for origin, _ in scan_tree(str(tmp_path), workers=1)]
    assert order == [*map(str, small), str(large)], "one thread for small files, one for large ones"


async def test_a_record_file_skips_blank_and_comment_lines_and_reports_bad_lines_by_number(tmp_path: Path) -> None:
    good = make_records(2)
    path = tmp_path / "dump.txt"
    path.write_text(f"# dump of transfer\n{format_line(good[0])}\n\nrelative x 1\n{format_line(good[1])}\n")
    found = [item async for item in read_record_file(str(path))]
    assert [origin for origin, _ in found] == [f"{path}:2", f"{path}:4", f"{path}:5"]
    assert found[0][1] == good[0] and found[2][1] == good[1]
    assert isinstance(found[1][1], str) and "not absolute" in found[1][1]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_the_feed_command_draws_a_progress_bar_on_a_terminal_and_prints_a_summary(
    push_daemon: StartPush, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = await push_daemon()
    for n in range(5):
        (tmp_path / f"f{n}").write_bytes(b"x" * n)
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    status = await feed_command(host=daemon.host, port=daemon.port, file=None, scan_dir=str(tmp_path), window=2,
                                    tls_ca=None, tls_cert=None, tls_key=None, rules=DEFAULT_RULES)
    assert status == 0
    last = terminal.getvalue().rsplit("\r", 1)[-1]
    assert last.startswith(f"[{'#' * 30}] 5/5  pushed 5, ignored 0, errors 0") and last.endswith("\n")
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("pushed 5, ignored 0, errors 0 in ") for line in printed)
