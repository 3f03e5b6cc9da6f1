"""The push daemon over TLS, and over mutual TLS where only clients with a certificate of the CA get in."""

from __future__ import annotations

import ssl

import pytest

from dataq.feed.client import Feeder, FeedError, client_tls_context
from dataq.store import QueueStore
from tests.helpers import make_records
from tests.push_support import (
    Certs,
    LineClient,
    StartPush,
    active_ids,
    reply_for,
)

RECORD = make_records(1)[0]


async def refused(port: int, tls: ssl.SSLContext | None) -> bool:
    """True if a client with ``tls`` gets no reply: the handshake fails, or the daemon closes at once."""
    try:
        client = await LineClient.connect(port, tls=tls)
    except (ssl.SSLError, ConnectionError):
        return True
    try:
        await client.send(RECORD)
        await client.reply()
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        await client.close()
    return False


async def test_a_feeder_pushes_over_tls_and_a_plain_tcp_client_is_not_answered(
    push_daemon: StartPush, certs: Certs, store: QueueStore
) -> None:
    daemon = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key)
    result = await Feeder("127.0.0.1", daemon.port, tls=client_tls_context(certs.ca)).feed(make_records(50))
    assert result.pushed == 50 and result.errors == 0
    assert await refused(daemon.port, None)
    assert len(await active_ids(store)) == 50


async def test_a_client_that_does_not_trust_the_server_certificate_does_not_connect(
    push_daemon: StartPush, certs: Certs
) -> None:
    daemon = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key)
    with pytest.raises(ssl.SSLCertVerificationError):
        await LineClient.connect(daemon.port, tls=ssl.create_default_context())


async def test_mutual_tls_serves_a_client_with_a_certificate_of_the_configured_ca(
    push_daemon: StartPush, certs: Certs
) -> None:
    daemon = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key, tls_ca=certs.ca)
    tls = client_tls_context(certs.ca, certs.client_cert, certs.client_key)
    client = await LineClient.connect(daemon.port, tls=tls)
    await client.send(RECORD)
    assert await client.reply() == reply_for(RECORD)
    await client.close()


@pytest.mark.parametrize("credentials", ["none", "other-ca"])
async def test_mutual_tls_rejects_a_client_without_a_valid_certificate(
    push_daemon: StartPush, certs: Certs, store: QueueStore, credentials: str
) -> None:
    daemon = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key, tls_ca=certs.ca)
    if credentials == "none":
        tls = client_tls_context(certs.ca)
    else:
        tls = client_tls_context(certs.ca, certs.rogue_cert, certs.rogue_key)
    assert await refused(daemon.port, tls)
    assert await active_ids(store) == []


async def test_a_feeder_whose_certificate_the_daemon_refuses_gives_up_after_its_retry_time(
    push_daemon: StartPush, certs: Certs
) -> None:
    daemon = await push_daemon(tls_cert=certs.server_cert, tls_key=certs.server_key, tls_ca=certs.ca)
    feeder = Feeder("127.0.0.1", daemon.port, tls=client_tls_context(certs.ca), retry_for=0.5)
    with pytest.raises(FeedError, match=r"cannot reach the push daemon at .*\(connection lost: "):
        await feeder.feed(make_records(1))
