"""The store over TLS (``rediss://``): server verified against a CA, client certificate presented."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataq.embedded.redis_server import free_port
from dataq.errors import StoreError
from dataq.store import QueueStore
from tests.conftest import MakeRedis
from tests.helpers import make_records
from tests.push_support import Certs


@pytest.fixture
def tls_url(make_redis: MakeRedis, certs: Certs, tmp_path: Path) -> str:
    port = free_port()
    make_redis(extra_args=["--tls-port", str(port), "--tls-cert-file", certs.server_cert, "--tls-key-file",
                           certs.server_key, "--tls-ca-cert-file", certs.ca, "--tls-auth-clients", "yes"])
    return f"rediss://127.0.0.1:{port}"


async def test_a_rediss_url_with_ca_and_client_certificate_carries_the_queue(tls_url: str, certs: Certs) -> None:
    store = QueueStore.from_url(tls_url, "transfer", ca_file=certs.ca, cert_file=certs.client_cert,
                                key_file=certs.client_key)
    try:
        assert (await store.push_batch(make_records(3), source="tls")).pushed == [True] * 3
        assert (await store.summary()).active == 3
    finally:
        await store.close()


@pytest.mark.parametrize("case", ["server not vouched for by our CA", "no client certificate"])
async def test_tls_that_cannot_be_trusted_both_ways_is_refused(tls_url: str, certs: Certs, case: str) -> None:
    if case == "no client certificate":
        store = QueueStore.from_url(tls_url, "transfer", ca_file=certs.ca, socket_timeout=2)
    else:
        rogue_ca = str(Path(certs.ca).parent / "rogue-ca.pem")
        store = QueueStore.from_url(tls_url, "transfer", ca_file=rogue_ca, cert_file=certs.client_cert,
                                    key_file=certs.client_key, socket_timeout=2)
    try:
        with pytest.raises(StoreError):
            await store.summary()
    finally:
        await store.close()
