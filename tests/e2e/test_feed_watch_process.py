"""``dataq feed --watch`` as a real process: killed with SIGKILL mid-stream, started after files were written,
left waiting for a push daemon for longer than the old 60 s limit; ``--status``; and its usage errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dataq.embedded.redis_server import free_port
from dataq.feed.spool_status import read_spool_status
from dataq.store import QueueStore
from testbed.waits import eventually
from tests.feed_support import md5, queued, until_queued, write_file
from tests.push_support import StartPush, dataq_command

ENV = {"DATAQ_CONFIG": "", "PATH": "/usr/bin:/bin"}


def feeder_config(tmp_path: Path) -> Path:
    config = tmp_path / "feeder.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n[log]\ndir = "{tmp_path / "log"}"\nformat = "json"\n')
    return config


async def start_watch(tmp_path: Path, port: int, *args: str) -> asyncio.subprocess.Process:
    (tmp_path / "incoming").mkdir(exist_ok=True)
    return await asyncio.create_subprocess_exec(
        *dataq_command(), "feed", "--config", str(feeder_config(tmp_path)), "--port", str(port),
        "--watch", str(tmp_path / "incoming"), "--spool", str(tmp_path / "spool"), "--settle", "0.2", *args,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=ENV)


async def dataq_feed(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *dataq_command(), "feed", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=ENV)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def watching(tmp_path: Path, port: int, *args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await start_watch(tmp_path, port, *args)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


def feeder_log(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "log" / "feed.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_feeder_killed_mid_stream_loses_nothing_and_after_a_restart_every_file_is_queued_once(
    push_daemon: StartPush, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    root = tmp_path / "incoming"
    expected = {write_file(root / f"before{n:04d}", f"b{n}".encode()): str(root / f"before{n:04d}")
                for n in range(1500)}
    async with watching(tmp_path, daemon.port) as first:
        for n in range(200):
            expected[write_file(root / f"during{n:04d}", f"d{n}".encode())] = str(root / f"during{n:04d}")

        async def some_queued() -> bool:
            return len(await queued(store)) >= 100

        await eventually(some_queued, 30)

        async def still_arriving() -> None:
            # Files keep coming until the kill, so that it strikes mid-stream however quick the feeder is.
            for n in range(200, 10_000):
                expected[write_file(root / f"during{n:04d}", f"d{n}".encode())] = str(root / f"during{n:04d}")
                await asyncio.sleep(0.001)

        writer = asyncio.create_task(still_arriving())
        await asyncio.sleep(0.2)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
    assert len(await queued(store)) < len(expected)
    for n in range(50):  # written while no feeder runs
        expected[write_file(root / f"down{n:02d}", f"w{n}".encode())] = str(root / f"down{n:02d}")
    async with watching(tmp_path, daemon.port) as second:
        assert await until_queued(store, len(expected), timeout=60) == expected

        async def spool_empty() -> bool:
            return read_spool_status(str(tmp_path / "spool")).pending == 0

        await eventually(spool_empty)
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), 30) == 0
    assert len(await queued(store)) == len(expected)


@pytest.mark.timeout(180)
async def test_a_push_daemon_away_for_longer_than_60_seconds_is_waited_for_and_then_fed(
    push_daemon: StartPush, store: QueueStore, tmp_path: Path
) -> None:
    port = free_port()
    root = tmp_path / "incoming"
    async with watching(tmp_path, port) as process:
        await asyncio.sleep(1.0)
        expected = {write_file(root / f"f{n}", f"away {n}".encode()): str(root / f"f{n}") for n in range(20)}
        started = time.monotonic()

        async def all_spooled() -> bool:
            return (tmp_path / "spool" / "spool.sqlite").exists() and \
                read_spool_status(str(tmp_path / "spool")).pending == 20

        await eventually(all_spooled)
        status, out, _ = await dataq_feed("--spool", str(tmp_path / "spool"), "--status")
        assert status == 0 and "pending: 20" in out and "OUTAGE: push daemons unreachable since" in out
        assert f"feeder running (pid {process.pid})" in out
        await asyncio.sleep(max(0.0, 65 - (time.monotonic() - started)))
        assert process.returncode is None  # it did not give up
        await push_daemon(port=port)
        assert await until_queued(store, 20, timeout=60) == expected
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    messages = [event["event"] for event in feeder_log(tmp_path)]
    assert messages.count("push daemon unreachable; records wait, retrying") == 1
    assert "push daemon reachable again" in messages
    status, out, _ = await dataq_feed("--spool", str(tmp_path / "spool"), "--status")
    assert status == 0 and "pending: 0" in out and "answered: 20" in out and "feeder not running" in out


async def test_without_a_spool_retry_for_sets_how_long_a_feed_tries_before_it_gives_up(tmp_path: Path) -> None:
    dump = tmp_path / "dump.txt"
    dump.write_text(f"/data/a {md5(b'a')} 1\n")
    started = time.monotonic()
    status, _, err = await dataq_feed("--port", str(free_port()), "--retry-for", "1", str(dump))
    assert status == 1 and "Error: cannot reach the push daemon at 127.0.0.1:" in err
    assert time.monotonic() - started < 15


async def test_a_spooled_feed_of_a_file_waits_for_the_push_daemon_and_ends_when_all_is_answered(
    push_daemon: StartPush, store: QueueStore, tmp_path: Path
) -> None:
    port = free_port()
    dump = tmp_path / "dump.txt"
    lines = {md5(f"{n}".encode()): f"/data/f{n}" for n in range(30)}
    dump.write_text("".join(f"{path} {checksum} 10\n" for checksum, path in lines.items()))
    feeding = asyncio.create_task(dataq_feed("--port", str(port), "--spool", str(tmp_path / "spool"), str(dump)))
    await asyncio.sleep(2.0)
    assert not feeding.done()
    await push_daemon(port=port)
    status, out, err = await asyncio.wait_for(feeding, 60)
    assert status == 0, err
    assert out.startswith("spooled 30; pushed 30, ignored 0, refused 0")
    assert await queued(store) == lines


async def test_a_damaged_spool_is_a_one_line_error_naming_its_file(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "spool.sqlite").write_bytes(os.urandom(4096))
    (tmp_path / "incoming").mkdir()
    status, _, err = await dataq_feed("--config", str(feeder_config(tmp_path)), "--port", str(free_port()),
                                      "--watch", str(tmp_path / "incoming"), "--spool", str(spool))
    assert status == 1
    assert f"Error: the spool {spool / 'spool.sqlite'} is damaged" in err and "Traceback" not in err
    status, _, err = await dataq_feed("--spool", str(spool), "--status")
    assert status == 1 and "is damaged" in err


async def test_a_second_feeder_on_a_spool_in_use_is_refused(tmp_path: Path) -> None:
    async with watching(tmp_path, free_port()) as first:
        async def spool_made() -> bool:
            return (tmp_path / "spool" / "lock").exists()

        await eventually(spool_made)
        status, _, err = await dataq_feed("--config", str(feeder_config(tmp_path)), "--port", str(free_port()),
                                          "--watch", str(tmp_path / "incoming"), "--spool", str(tmp_path / "spool"))
        assert status == 1 and f"in use by another feeder (pid {first.pid})" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--recursive", "dump.txt"], "--recursive goes with --watch DIR"),
        (["--spool", "s", "--retry-for", "5", "dump.txt"], "--retry-for is for a feed without a spool"),
        (["--watch", ".", "dump.txt"], "give one of FILE, --scan DIR or --watch DIR"),
        (["--target", "h:1", "--port", "5", "dump.txt"], "give --target HOST:PORT or --host/--port, not both"),
        (["--target", "nohost", "dump.txt"], "'nohost' has no port"),
        (["--status", "dump.txt"], "--status and --retry-refused look at a spool"),
    ],
)
async def test_usage_mistakes_are_named(tmp_path: Path, args: list[str], expected: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dump.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    status, _, err = await dataq_feed(*args)
    assert status == 2 and expected in err


async def test_status_lists_refused_records_and_retry_refused_makes_them_pending(
    push_daemon: StartPush, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    config = tmp_path / "feeder.toml"
    config.write_text('[queues.transfer]\nchecksum_pattern = "[A-Z]+"\n')  # the daemon wants md5 hex
    dump = tmp_path / "dump.txt"
    dump.write_text("/data/a.fits ABC 10\n")
    status, out, _ = await dataq_feed("--config", str(config), "--port", str(daemon.port), "--spool",
                                      str(tmp_path / "spool"), str(dump))
    assert status == 1 and "refused 1" in out and "1 refused records kept in the spool" in out
    status, out, _ = await dataq_feed("--spool", str(tmp_path / "spool"), "--status")
    assert "refused: 1" in out and "/data/a.fits: checksum 'ABC' does not match the pattern" in out
    status, out, _ = await dataq_feed("--spool", str(tmp_path / "spool"), "--retry-refused", "--status")
    assert status == 0 and "1 refused records are pending again" in out and "pending: 1" in out
