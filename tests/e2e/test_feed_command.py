"""``dataq feed`` as a real subprocess against a push daemon: files, directory scans, refusals, TLS."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from dataq.record import format_line
from dataq.store import QueueList, QueueStore
from tests.helpers import make_records
from tests.push_support import (
    Certs,
    StartPush,
    active_ids,
    dataq_command,
)


async def dataq_feed(*args: str, config: Path | None = None) -> tuple[int, str, str]:
    """Run ``dataq feed ARGS`` without blocking the event loop the in-process daemon runs on."""
    options = ["--config", str(config)] if config else []
    process = await asyncio.create_subprocess_exec(
        *dataq_command(), "feed", *options, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"DATAQ_CONFIG": "", "PATH": "/usr/bin:/bin"})
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_feeding_a_dump_file_pushes_every_record_and_prints_a_one_line_summary(
    push_daemon: StartPush, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    records = make_records(500)
    dump = tmp_path / "dump.txt"
    dump.write_text("".join(format_line(r) + "\n" for r in records))
    status, out, err = await dataq_feed("--port", str(daemon.port), "--window", "64", str(dump))
    assert status == 0, err
    assert out.startswith("pushed 500, ignored 0, errors 0 in ") and "records/s" in out
    assert len(await active_ids(store)) == 500
    status, out, _ = await dataq_feed("--port", str(daemon.port), str(dump))
    assert status == 0 and out.startswith("pushed 0, ignored 500, errors 0")


async def test_a_line_that_cannot_be_a_record_is_reported_by_line_number_and_the_exit_status_is_1(
    push_daemon: StartPush, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    good = make_records(2)
    dump = tmp_path / "dump.txt"
    dump.write_text(f"{format_line(good[0])}\nrelative/path {good[1].checksum} 5\n{format_line(good[1])}\n")
    status, out, err = await dataq_feed("--port", str(daemon.port), str(dump))
    assert status == 1
    assert f"{dump}:2: not sent: path 'relative/path' is not absolute" in err
    assert out.startswith("pushed 2, ignored 0, errors 0") and "1 lines not sent" in out
    assert sorted(await active_ids(store)) == sorted(r.checksum for r in good)


async def test_a_record_the_daemon_refuses_is_reported_with_its_error_and_the_exit_status_is_1(
    push_daemon: StartPush, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    dump = tmp_path / "dump.txt"
    # The feeder's settings accept any checksum; the daemon's queue wants md5 hex.
    config = tmp_path / "feeder.toml"
    config.write_text('[queues.transfer]\nchecksum_pattern = "[A-Z]+"\n')
    dump.write_text("/data/a.fits ABC 10\n")
    status, out, err = await dataq_feed("--port", str(daemon.port), str(dump), config=config)
    assert status == 1
    assert f"{dump}:1: Error: checksum 'ABC' does not match the pattern '[0-9a-f]{{32}}'" in err
    assert out.startswith("pushed 0, ignored 0, errors 1")


async def test_scanning_a_directory_pushes_every_file_with_its_md5_and_size(
    push_daemon: StartPush, store: QueueStore, tmp_path: Path
) -> None:
    daemon = await push_daemon()
    tree = tmp_path / "mtn" / "20140708"
    tree.mkdir(parents=True)
    contents = {tree / f"c15e_{n:04d}.fits": f"frame {n}".encode() * (n + 1) for n in range(40)}
    contents[tree / "with space.fits"] = b"spaced"
    for path, content in contents.items():
        path.write_bytes(content)
    status, out, err = await dataq_feed("--port", str(daemon.port), "--scan", str(tmp_path / "mtn"))
    assert status == 0, err
    assert out.startswith("pushed 41, ignored 0, errors 0")
    stored = {r.path: r for r in await store.list_records(QueueList.ACTIVE)}
    assert set(stored) == {str(path) for path in contents}
    for path, content in contents.items():
        assert (stored[str(path)].checksum, stored[str(path)].size) == (hashlib.md5(content).hexdigest(), len(content))


async def test_feeding_over_mutual_tls_with_the_client_certificate_pushes(
    push_daemon: StartPush, certs: Certs, tmp_path: Path
) -> None:
    daemon = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key, tls_ca=certs.ca)
    dump = tmp_path / "dump.txt"
    dump.write_text(format_line(make_records(1)[0]) + "\n")
    status, out, err = await dataq_feed("--port", str(daemon.port), "--tls-ca", certs.ca, "--tls-cert",
                                        certs.client_cert, "--tls-key", certs.client_key, str(dump))
    assert status == 0 and out.startswith("pushed 1,"), err


async def test_a_feeder_that_does_not_trust_the_daemon_certificate_fails_at_once_instead_of_retrying(
    push_daemon: StartPush, certs: Certs, tmp_path: Path
) -> None:
    daemon = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key)
    dump = tmp_path / "dump.txt"
    dump.write_text(format_line(make_records(1)[0]) + "\n")
    status, _, err = await dataq_feed("--port", str(daemon.port), "--tls-ca", certs.rogue_cert, str(dump))
    assert status == 1
    assert "Error: TLS with the push daemon" in err and "CERTIFICATE_VERIFY_FAILED" in err
