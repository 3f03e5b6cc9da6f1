"""``network_move`` against a real ``rsync --daemon`` and real dataq push daemons, all on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dataq.actions.files import SourceMismatch
from dataq.actions.network_move import NetworkMoveAction
from dataq.actions.registry import load_actions
from dataq.config import QueueSettings
from dataq.embedded.redis_server import free_port
from dataq.errors import ActionError, ConfigError, Retryable
from dataq.feed.spool_status import read_spool_status
from dataq.handshake import OURS, Capability, hello_line, is_hello
from dataq.record import SITE_KEY, Record
from dataq.store import QueueList, QueueStore
from testbed.actions import action_context
from testbed.rsync import RsyncDaemon
from testbed.waits import eventually
from tests.actions_support import (
    LOOPBACK,
    PUSHED_DATE,
    OlderPeer,
    SilentServer,
    corrupting_rsync,
    fake_ssh,
    make_file,
    md5,
    peer_server,
)
from tests.checksum_vectors import VECTORS
from tests.push_support import QUEUE, Certs, RunningPush, push_settings, start_push

DATA = b"dome flat " * 5000
KILLED_WITHIN = 5.0
"""Seconds a cancelled transfer's rsync has to let go of its connection."""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return tmp_path / "mountain"


@pytest.fixture
async def next_site(redis_url: str, tmp_path: Path) -> AsyncIterator[RunningPush]:
    """The next site's push daemon (its queue on the test Redis)."""
    running = await start_push(push_settings(redis_url, tmp_path / "next-data"))
    yield running
    await running.shutdown()


@pytest.fixture
async def next_queue(redis_url: str) -> AsyncIterator[QueueStore]:
    store = QueueStore.from_url(redis_url, QUEUE)
    yield store
    await store.close()


MADE: list[NetworkMoveAction] = []
"""The actions a test made, closed after it (their links to the next sites among what they let go of)."""


@pytest.fixture(autouse=True)
async def actions_closed() -> AsyncIterator[None]:
    yield
    for action in MADE:
        await action.close()
    MADE.clear()


def make_action(tmp_path: Path, site: str = "", checksum: str = "md5", **options: Any) -> NetworkMoveAction:
    """The action as the pop daemon builds it: through the registry, from a queue's options table."""
    queue = QueueSettings("transfer", actions=("network_move",), action_options={"network_move": options},
                          checksum=checksum)
    (action,) = load_actions(action_context(queue, site=site))
    assert isinstance(action, NetworkMoveAction)
    MADE.append(action)
    return action


# --- transfer and verification ------------------------------------------------------------------------------


async def test_file_arrives_at_the_daemon_in_the_layout_with_the_same_bytes(
        daemon: RsyncDaemon, valley: Path, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "c15e_140708_000001_ori.fits", DATA)
    action = make_action(tmp_path, destination=daemon.url("valley", "incoming"), layout="{date}/{name}")
    await action.start()
    await action.run(record)
    arrived = valley / "incoming" / PUSHED_DATE / "c15e_140708_000001_ori.fits"
    assert md5(arrived.read_bytes()) == record.checksum
    assert Path(record.path).exists(), "the source stays unless remove_source is set"


async def test_running_a_record_again_sends_nothing_and_succeeds(daemon: RsyncDaemon, valley: Path, source: Path,
                                                                 tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    action = make_action(tmp_path, destination=daemon.url("valley"))
    await action.run(record)
    inode = (valley / "a.fits").stat().st_ino
    await action.run(record)
    assert (valley / "a.fits").stat().st_ino == inode, "an identical file is not written again"
    assert daemon.received() == ["a.fits"], "sent once"


async def test_remove_source_deletes_it_after_the_verified_transfer(daemon: RsyncDaemon, valley: Path,
                                                                    source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    await make_action(tmp_path, destination=daemon.url("valley"), remove_source=True).run(record)
    assert not Path(record.path).exists()
    assert md5((valley / "a.fits").read_bytes()) == record.checksum


async def test_retry_after_the_source_was_removed_succeeds_from_the_verified_destination(
        daemon: RsyncDaemon, valley: Path, source: Path, tmp_path: Path) -> None:
    # The daemon died after the source was removed, before the record was acknowledged: it runs again.
    record = make_file(source, "a.fits", DATA)
    action = make_action(tmp_path, destination=daemon.url("valley"), remove_source=True)
    await action.run(record)
    await action.run(record)
    assert daemon.received() == ["a.fits"], "nothing is sent again"


async def test_missing_source_with_other_data_at_the_destination_fails(daemon: RsyncDaemon, valley: Path,
                                                                       source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    os.unlink(record.path)
    (valley / "a.fits").write_bytes(b"an older file of the same name")
    with pytest.raises(SourceMismatch, match=r"does not exist and .* holds other data"):
        await make_action(tmp_path, destination=daemon.url("valley"), remove_source=True).run(record)


async def test_missing_source_missing_at_the_destination_too_fails(daemon: RsyncDaemon, source: Path,
                                                                   tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    os.unlink(record.path)
    with pytest.raises(ActionError, match=r"source file .* does not exist; checking .*exit status 23"):
        await make_action(tmp_path, destination=daemon.url("valley")).run(record)


async def test_source_that_does_not_match_its_record_is_never_sent(daemon: RsyncDaemon, valley: Path,
                                                                   source: Path, tmp_path: Path) -> None:
    record = replace(make_file(source, "a.fits", DATA), checksum=md5(b"something else"))
    with pytest.raises(SourceMismatch, match="has checksum"):
        await make_action(tmp_path, destination=daemon.url("valley"), remove_source=True).run(record)
    assert list(valley.iterdir()) == []
    assert Path(record.path).exists()


async def test_with_reread_a_destination_that_does_not_hold_what_was_sent_fails_and_keeps_the_source(
        daemon: RsyncDaemon, valley: Path, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    liar = corrupting_rsync(tmp_path, valley / "a.fits")
    action = make_action(tmp_path, destination=daemon.url("valley"), rsync=str(liar), remove_source=True,
                         reread=True)
    with pytest.raises(ActionError, match="destination differs from the source"):
        await action.run(record)
    assert Path(record.path).exists()


async def test_a_source_changed_while_it_was_sent_fails_the_record_and_keeps_the_source(
        daemon: RsyncDaemon, source: Path, tmp_path: Path) -> None:
    # dataq read the source, then it changed before rsync read it: what arrived is not what was checked.
    record = make_file(source, "a.fits", DATA)
    meddling = tmp_path / "meddling-rsync"
    meddling.write_text(f'#!/bin/sh\ntouch "{record.path}"\nexec "{shutil.which("rsync")}" "$@"\n')
    meddling.chmod(0o755)
    action = make_action(tmp_path, destination=daemon.url("valley"), rsync=str(meddling), remove_source=True)
    with pytest.raises(ActionError, match="changed while it was sent"):
        await action.run(record)
    assert Path(record.path).exists()


async def test_without_verify_a_lying_destination_goes_unnoticed(daemon: RsyncDaemon, valley: Path, source: Path,
                                                                  tmp_path: Path) -> None:
    # The counterpart of the test above: it is the verification that catches the damage.
    record = make_file(source, "a.fits", DATA)
    liar = corrupting_rsync(tmp_path, valley / "a.fits")
    await make_action(tmp_path, destination=daemon.url("valley"), rsync=str(liar), verify=False).run(record)
    assert md5((valley / "a.fits").read_bytes()) != record.checksum


async def test_file_name_with_spaces_and_shell_syntax_is_passed_as_one_argument(
        daemon: RsyncDaemon, valley: Path, source: Path, tmp_path: Path) -> None:
    name = "a b;touch pwned;$(touch pwned2)`touch pwned3`.fits"
    record = make_file(source, name, DATA)
    await make_action(tmp_path, destination=daemon.url("valley")).run(record)
    assert sorted(p.name for p in valley.iterdir()) == [name]
    assert not any(p.name.startswith("pwned") for p in tmp_path.rglob("pwned*"))


async def test_ssh_style_destination_transfers_and_verifies(source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    target = tmp_path / "over-ssh"
    action = make_action(tmp_path, destination=f"observer@valley-host:{target}", layout="{checksum2}/{name}",
                         extra_args=["-e", str(fake_ssh(tmp_path))])
    await action.run(record)
    assert md5((target / record.checksum[:2] / "a.fits").read_bytes()) == record.checksum


async def test_local_directory_destination(source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    await make_action(tmp_path, destination=str(tmp_path / "mounted")).run(record)
    assert md5((tmp_path / "mounted" / "a.fits").read_bytes()) == record.checksum


# --- rsync failures and timeouts ----------------------------------------------------------------------------


async def test_unknown_module_is_a_failure_of_the_record_with_rsync_status_and_its_message(
        daemon: RsyncDaemon, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    expected = r"exit status 5 \(error starting client-server protocol\).*nowhere"
    with pytest.raises(ActionError, match=expected) as raised:
        await make_action(tmp_path, destination=daemon.url("nowhere")).run(record)
    assert not isinstance(raised.value, Retryable)


async def test_daemon_not_listening_is_a_transient_outage_of_the_destination(source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    destination = f"rsync://{LOOPBACK}:{free_port()}/valley"
    with pytest.raises(Retryable, match="exit status 10") as raised:
        await make_action(tmp_path, destination=destination).run(record)
    assert raised.value.destination == destination


async def test_hung_daemon_is_a_transient_outage_from_rsync_io_timeout(source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    async with SilentServer() as hung:
        action = make_action(tmp_path, destination=f"rsync://{LOOPBACK}:{hung.port}/valley", io_timeout=1.0)
        with pytest.raises(Retryable, match="timeout"):
            await action.run(record)


async def test_action_timeout_kills_the_transfer(source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    async with SilentServer() as hung:
        action = make_action(tmp_path, destination=f"rsync://{LOOPBACK}:{hung.port}/valley", io_timeout=600.0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.0):
                await action.run(record)
        # rsync would wait 600 s for the daemon; killed, its connection closes at once.
        await asyncio.wait_for(hung.closed.wait(), KILLED_WITHIN)


async def test_missing_rsync_program_fails_at_start(tmp_path: Path) -> None:
    action = make_action(tmp_path, destination="/data", rsync=str(tmp_path / "no-rsync"))
    with pytest.raises(ActionError, match="not found"):
        await action.start()


@pytest.mark.parametrize("options", [
    {"destination": "ftp://host/path"},
    {"destination": "rsync://host"},
    {"destination": "relative/path"},
    {"destination": "host:path with space"},
    {"destination": "-e:evil"},
    {"destination": "-oProxyCommand@host:/data"},
    {"destination": "rsync://-host/mod"},
    {"destination": "/data", "layout": "../{name}"},
    {"destination": "/data", "next_sites": ["127.0.0.1:9988"]},
    {"destination": "/data", "next_sites": ["valley-host"], "next_path": "/d/{name}"},
    {"destination": "/data", "next_sites": ["valley-host:9988"], "next_path": "d/{name}"},
    {"destination": "/data", "io_timeout": 0},
    {"destination": "/data", "handon_spool": "/var/spool/handon"},
    {"destination": "/data", "next_sites": ["v:9988"], "next_path": "/d/{name}", "handon_spool": "relative"},
    {"destination": "/data", "next_sites": ["v:9988"], "next_path": "/d/{name}", "handon_tls_cert": "/c.pem"},
    {"destination": "/data", "destinaton": "/x"},
])
def test_bad_options_are_config_errors(options: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        make_action(tmp_path, **options)


@pytest.mark.parametrize(("options", "key"), [
    ({"remove_source": "after_receipt"}, "remove_source"),
    ({"remove_source": "later"}, "remove_source"),
    ({"remove_source": 1}, "remove_source"),
    ({"next_sites": ["v:9988"], "next_path": "/d/{name}", "remove_source": "after_receipt", "custody": False},
     "custody"),
    ({"next_sites": ["v:9988"], "next_path": "/d/{name}", "resend_after": 0}, "resend_after"),
    ({"next_sites": ["v:9988"], "next_path": "/d/{name}", "receipt_interval": -1}, "receipt_interval"),
])
def test_custody_settings_that_cannot_work_are_refused_naming_the_key(options: dict[str, Any], key: str,
                                                                      tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=key):
        make_action(tmp_path, destination="/data", **options)


@pytest.mark.parametrize(("options", "words"), [
    ({"max_connections": 0}, "max_connections must be at least 1"),
    ({"bandwidth": "fast"}, "bandwidth 'fast': 'fast' is not a rate"),
    ({"windows": ["19:00-07:00", "06:00-08:00"]}, "overlap"),
])
def test_limits_given_wrong_are_refused_naming_the_key(options: dict[str, Any], words: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"queues\.transfer\.network_move") as refused:
        make_action(tmp_path, destination="/data", **options)
    assert words in str(refused.value)


@pytest.mark.parametrize("destination", ["rsync://u@valley:873/mod/deep/path", "rsync://valley/mod",
                                         "observer@valley:/data", "valley:", "[::1]:/data", "/data"])
def test_accepted_destination_forms(destination: str, tmp_path: Path) -> None:
    assert make_action(tmp_path, destination=destination).options.destination == destination


# --- hand-on to the next site -------------------------------------------------------------------------------


def handon_options(daemon: RsyncDaemon, *sites: str, **extra: Any) -> dict[str, Any]:
    return {"destination": daemon.url("valley", "incoming"), "layout": "{date}/{name}",
            "next_sites": list(sites), "next_path": "/valley/data/{relpath}", "handon_timeout": 1.0, **extra}


async def next_site_holds(queue: QueueStore, record: Record) -> Record | None:
    found = [r for r in await queue.list_records(QueueList.ACTIVE) if r.checksum == record.checksum]
    return found[0] if found else None


async def test_verified_file_is_handed_on_with_its_path_at_the_next_site(
        daemon: RsyncDaemon, next_site: RunningPush, next_queue: QueueStore, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    action = make_action(tmp_path, **handon_options(daemon, f"{LOOPBACK}:{next_site.port}", remove_source=True))
    await action.run(record)
    handed = await next_site_holds(next_queue, record)
    assert handed is not None
    assert (handed.path, handed.size) == (f"/valley/data/{PUSHED_DATE}/a.fits", record.size)
    assert not Path(record.path).exists()


async def test_record_the_next_site_already_holds_is_a_success(
        daemon: RsyncDaemon, next_site: RunningPush, next_queue: QueueStore, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    action = make_action(tmp_path, **handon_options(daemon, f"{LOOPBACK}:{next_site.port}"))
    await action.run(record)
    await action.run(record)  # answered "Ignored": the next site has it
    assert len(await next_queue.list_records(QueueList.ACTIVE)) == 1


async def test_hand_on_fails_over_past_sites_that_refuse_or_do_not_answer(
        daemon: RsyncDaemon, next_site: RunningPush, next_queue: QueueStore, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    async with SilentServer() as hung:
        sites = (f"{LOOPBACK}:{free_port()}", f"{LOOPBACK}:{hung.port}",
                 f"{LOOPBACK}:{next_site.port}")
        await make_action(tmp_path, **handon_options(daemon, *sites, handon_timeout=0.5)).run(record)
    assert await next_site_holds(next_queue, record) is not None


async def test_error_reply_of_the_next_site_fails_the_record_and_keeps_the_source(
        daemon: RsyncDaemon, next_site: RunningPush, next_queue: QueueStore, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    too_long = "/" + "x" * 5000 + "/{name}"  # the next site refuses a path longer than PATH_MAX
    options = handon_options(daemon, f"{LOOPBACK}:{next_site.port}", next_path=too_long, remove_source=True)
    with pytest.raises(ActionError, match=f"next site {LOOPBACK}:{next_site.port} refused the record: path is"):
        await make_action(tmp_path, **options).run(record)
    assert Path(record.path).exists()
    assert await next_queue.list_records(QueueList.ACTIVE) == []


async def test_no_next_site_answering_is_a_transient_outage_naming_each(daemon: RsyncDaemon, valley: Path,
                                                                        source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    down = f"{LOOPBACK}:{free_port()}"
    async with SilentServer() as hung:
        silent = f"{LOOPBACK}:{hung.port}"
        action = make_action(tmp_path, **handon_options(daemon, down, silent, handon_timeout=0.5,
                                                          remove_source=True))
        with pytest.raises(Retryable, match="no next site took the record") as caught:
            await action.run(record)
    assert f"{down}: cannot connect" in str(caught.value)
    assert f"{silent}: no answer to the handshake within 0.5 s" in str(caught.value)
    assert caught.value.destination == f"next sites {down}, {silent}"
    assert Path(record.path).exists(), "the source stays until the next site holds the record"
    assert os.path.exists(valley / "incoming" / PUSHED_DATE / "a.fits"), "the transfer itself was done"


async def test_the_hand_on_names_this_site_and_the_next_site_stores_it_with_the_record(
        daemon: RsyncDaemon, next_site: RunningPush, next_queue: QueueStore, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    await make_action(tmp_path, site="mountain", **handon_options(daemon, f"{LOOPBACK}:{next_site.port}")).run(record)
    handed = await next_site_holds(next_queue, record)
    assert handed is not None and handed.source is not None and handed.source.startswith("mountain@127.0.0.1:")


async def test_a_record_sent_again_is_handed_on_marked_again_and_the_next_site_takes_it_though_done_there(
        daemon: RsyncDaemon, next_site: RunningPush, next_queue: QueueStore, source: Path, tmp_path: Path) -> None:
    record = make_file(source, "a.fits", DATA)
    action = make_action(tmp_path, site="mountain", **handon_options(daemon, f"{LOOPBACK}:{next_site.port}"))
    await action.run(record)
    await next_queue.heartbeat("valley-pop", {"role": "pop"}, {"running": 0}, 30.0)
    (handed,) = (await next_queue.claim("valley-pop", 1)).records
    assert await next_queue.ack("valley-pop", [(handed.checksum, "")]) == [True]  # done at the next site
    await action.run(record)
    assert await next_site_holds(next_queue, record) is None, "a plain hand-on of a done record is ignored"

    await action.run(replace(record, again=True))
    again = await next_site_holds(next_queue, record)
    assert again is not None and again.again, "taken, and marked again to be handed on further"


async def test_a_record_sent_again_to_a_site_that_does_not_speak_again_and_ignores_it_fails_saying_why(
        daemon: RsyncDaemon, source: Path, tmp_path: Path) -> None:
    async def before_again(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A dataq of before the mark: it answers the handshake without naming "again", and remembers the record done.
        while line := await reader.readline():
            if is_hello(line):
                writer.write(hello_line(OURS - {Capability.AGAIN}))
            else:
                writer.write(b"Ignored ID=" + json.loads(line)["checksum"].encode() + b"\n")
            await writer.drain()
        writer.close()

    async with peer_server(before_again) as port:
        action = make_action(tmp_path, site="mountain", **handon_options(daemon, f"{LOOPBACK}:{port}"))
        record = make_file(source, "a.fits", DATA)
        await action.run(record)  # not sent again: Ignored is the answer of a site that holds it
        with pytest.raises(ActionError, match="does not speak 'again'"):
            await action.run(replace(record, again=True))
        await action.close()


@contextlib.asynccontextmanager
async def handing_on_to_an_older_site(daemon: RsyncDaemon, tmp_path: Path, spooled: bool, peer: OlderPeer | None = None
                                      ) -> AsyncIterator[tuple[OlderPeer, NetworkMoveAction]]:
    """A ``network_move`` of the site "mountain", started, that hands on (through a spool if ``spooled``) to a
    push daemon older than the handshake (``peer``, by default one refusing in its parser's words)."""
    peer = peer or OlderPeer()
    async with peer_server(peer.serve) as port:
        spool = {"handon_spool": str(tmp_path / "handon")} if spooled else {}
        action = make_action(tmp_path, site="mountain", **handon_options(daemon, f"{LOOPBACK}:{port}", **spool))
        await action.start()
        try:
            yield peer, action
        finally:
            await action.close()


@pytest.mark.parametrize("spooled", [False, True])
async def test_a_next_site_upgraded_meanwhile_gets_the_full_form_from_its_next_connection(
        daemon: RsyncDaemon, source: Path, tmp_path: Path, spooled: bool) -> None:
    # Sites are upgraded one at a time: a next site without the handshake gets hand-ons in the 2014 form, and
    # once upgraded (restarted), the full form at once: each connection learns anew what it speaks.
    early, late = [make_file(source, f"{n}.fits", DATA + bytes([n])) for n in range(2)]

    def lines_of(record: Record) -> list[bytes]:
        return [line for line in peer.lines if record.checksum.encode() in line]

    async def taken_plain(record: Record) -> bool:
        return any(not line.startswith(b"{") for line in lines_of(record))

    async def taken_named(record: Record) -> bool:
        return any(line.startswith(b"{") and json.loads(line).get(SITE_KEY) == "mountain" for line in lines_of(record))

    async with handing_on_to_an_older_site(daemon, tmp_path, spooled) as (peer, action):
        await action.run(early)
        await eventually(lambda: taken_plain(early), 20, what="the first hand-on, without the name")
        peer.upgrade()
        await action.run(late)
        await eventually(lambda: taken_named(late), 20, what="the later hand-on, with the name")
        assert not await taken_plain(late)


REWORDED = {"its parser's words": None, "other words": lambda key: f"Schlüssel {key} unbekannt",
            "no words": lambda key: ""}
"""How an older push daemon words its refusal: what the hand-on does must not depend on it."""


@pytest.mark.parametrize("wording", REWORDED)
@pytest.mark.parametrize("spooled", [False, True])
async def test_a_next_site_older_than_site_names_gets_the_hand_on_without_the_name(
        daemon: RsyncDaemon, source: Path, tmp_path: Path, spooled: bool, wording: str) -> None:
    records = [make_file(source, f"{n}.fits", DATA + bytes([n])) for n in range(3)]
    older = OlderPeer(REWORDED[wording])
    async with handing_on_to_an_older_site(daemon, tmp_path, spooled, older) as (peer, action):
        for record in records:
            await action.run(record)

        async def all_taken() -> bool:
            return sum(1 for line in peer.lines if not line.startswith(b"{")) == 3

        await eventually(all_taken, 20)
    assert not [line for line in peer.lines if line.startswith(b"{")], "never refused: sent in the form it takes"
    assert peer.hellos >= 1
    if spooled:
        status = read_spool_status(str(tmp_path / "handon"))
        assert (status.pending, status.refused) == (0, 0)


async def test_an_xxh128_record_is_never_handed_to_a_site_older_than_algorithm_names(
        daemon: RsyncDaemon, source: Path, tmp_path: Path) -> None:
    record = replace(make_file(source, "abc.fits", b"abc"), checksum=VECTORS["xxh128"][b"abc"])
    peer = OlderPeer()
    async with peer_server(peer.serve) as port:
        action = make_action(tmp_path, site="mountain", checksum="xxh128",
                             **handon_options(daemon, f"{LOOPBACK}:{port}"))
        await action.start()
        try:
            with pytest.raises(ActionError, match=r"does not speak checksum algorithms .*: it cannot take xxh128 "
                                                  r"checksums"):
                await action.run(record)
        finally:
            await action.close()
    assert all(line.startswith(b"{") for line in peer.lines), "never sent in the plain form, as if md5"


async def test_a_refusal_in_an_older_sites_words_from_a_site_that_answers_the_handshake_refuses_the_record(
        daemon: RsyncDaemon, source: Path, tmp_path: Path) -> None:
    # Once, those words made the hand-on send the record again without its names; now only the handshake counts.
    record = make_file(source, "a.fits", DATA)
    lines: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            lines.append(line)
            writer.write(hello_line() if is_hello(line) else
                         b"Error: unknown JSON key 'site'; expected only ['checksum', 'path', 'size']\n")
        writer.close()

    async with peer_server(serve) as port:
        action = make_action(tmp_path, site="mountain", **handon_options(daemon, f"{LOOPBACK}:{port}"))
        await action.start()
        try:
            with pytest.raises(ActionError, match="refused the record: unknown JSON key 'site'"):
                await action.run(record)
        finally:
            await action.close()
    assert len(lines) == 2 and json.loads(lines[1])[SITE_KEY] == "mountain", "the hello, then the record once"


async def test_a_full_custody_makes_hand_ons_wait_as_for_an_outage(
        daemon: RsyncDaemon, next_site: RunningPush, next_queue: QueueStore, source: Path, tmp_path: Path,
        redis_url: str) -> None:
    first, second = (make_file(source, f"{n}.fits", DATA + bytes([n])) for n in range(2))
    queue = QueueSettings("mountain", actions=("network_move",), action_options={"network_move": handon_options(
        daemon, f"{LOOPBACK}:{next_site.port}", custody_max=1)})
    store = QueueStore.from_url(redis_url, "mountain")
    try:
        (action,) = load_actions(action_context(queue, store=store, custody=True))
        await action.run(first)
        with pytest.raises(Retryable, match=r"custody is full: 1 records handed on wait .*custody_max 1"):
            await action.run(second)
        assert await next_site_holds(next_queue, second) is None, "not handed on: custody could not hold it"
        assert (await store.summary()).custody == 1
    finally:
        await store.close()


# --- hand-on through a spool, and over TLS -------------------------------------------------------------------


async def test_with_a_hand_on_spool_the_record_succeeds_while_the_next_site_is_away_and_reaches_it_later(
        daemon: RsyncDaemon, redis_url: str, next_queue: QueueStore, source: Path, tmp_path: Path) -> None:
    port = free_port()
    record = make_file(source, "a.fits", DATA)
    action = make_action(tmp_path, **handon_options(daemon, f"{LOOPBACK}:{port}", remove_source=True,
                                                     handon_spool=str(tmp_path / "handon")))
    await action.start()
    try:
        await action.run(record)  # the next site is down: kept in the spool, done here
        assert not Path(record.path).exists()
        assert read_spool_status(str(tmp_path / "handon")).pending == 1
        later = await start_push(push_settings(redis_url, tmp_path / "next-data", port=port))
        try:
            async def arrived() -> bool:
                return await next_site_holds(next_queue, record) is not None

            await eventually(arrived, 40)
        finally:
            await later.shutdown()
    finally:
        await action.close()
    handed = await next_site_holds(next_queue, record)
    assert handed is not None and handed.path == f"/valley/data/{PUSHED_DATE}/a.fits"
    assert read_spool_status(str(tmp_path / "handon")).pending == 0


async def test_two_pop_daemons_cannot_share_a_hand_on_spool(daemon: RsyncDaemon, tmp_path: Path) -> None:
    options = handon_options(daemon, f"{LOOPBACK}:{free_port()}",
                              handon_spool=str(tmp_path / "handon"))
    first = make_action(tmp_path, **options)
    await first.start()
    try:
        with pytest.raises(ActionError, match=r"network_move: the spool .* is in use by another feeder"):
            await make_action(tmp_path, **options).start()
    finally:
        await first.close()


async def test_the_hand_on_speaks_mutual_tls_to_a_next_site_that_asks_for_it(
        daemon: RsyncDaemon, redis_url: str, next_queue: QueueStore, source: Path, tmp_path: Path,
        certs: Certs) -> None:
    tls_site = await start_push(push_settings(redis_url, tmp_path / "tls-data", tls_cert=certs.server_cert,
                                              tls_key=certs.server_key, tls_ca=certs.ca))
    try:
        record = make_file(source, "a.fits", DATA)
        site = f"{LOOPBACK}:{tls_site.port}"
        plain = make_action(tmp_path, **handon_options(daemon, site))
        await plain.start()
        with pytest.raises(Retryable, match="no next site took the record"):
            await plain.run(record)
        await plain.close()
        mutual = make_action(tmp_path, **handon_options(daemon, site, handon_tls_ca=certs.ca,
                                                          handon_tls_cert=certs.client_cert,
                                                          handon_tls_key=certs.client_key))
        await mutual.start()
        await mutual.run(record)
        await mutual.close()
        assert await next_site_holds(next_queue, record) is not None
    finally:
        await tls_site.shutdown()


async def test_an_unreadable_client_certificate_stops_the_action_at_start(daemon: RsyncDaemon, tmp_path: Path) -> None:
    action = make_action(tmp_path, **handon_options(daemon, f"{LOOPBACK}:9", handon_tls_cert=str(tmp_path / "no"),
                                                     handon_tls_key=str(tmp_path / "no")))
    with pytest.raises(ActionError, match="network_move: cannot load the client certificate"):
        await action.start()
