"""Redis Sentinel over TLS: sentinels and servers that answer clients with TLS only, verified against the
operator's CA, with a client certificate (``[redis] tls = true``, ``ca_file``, ``cert_file``, ``key_file``).

Real processes on loopback (:class:`testbed.sentinel.SentinelTopology` with TLS): the servers replicate and the
sentinels probe, vote and hand out addresses over TLS too, so dataq sees nothing but TLS ports.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dataq.errors import StoreUnavailable
from testbed.sentinel import SentinelTopology
from tests.cli_support import cli_with
from tests.helpers import make_records
from tests.push_support import Certs, every_record_pushed_and_active, feed_across
from tests.sentinel_support import (
    fail_over,
    ha_settings,
    open_ha_store,
    the_cli_pushes_and_shows_the_master_its_replica_and_every_sentinel,
    write_ha_config,
)

FEED_TIMEOUT = 180.0


async def test_a_feed_through_tls_sentinels_completes_across_a_master_kill_with_nothing_lost(
    tls_sentinel_topology: SentinelTopology, certs: Certs, tmp_path: Path
) -> None:
    settings = ha_settings(tls_sentinel_topology, tmp_path, certs=certs)
    records = make_records(5_000)
    result = await feed_across(settings, records, lambda: fail_over(tls_sentinel_topology), FEED_TIMEOUT)
    store = open_ha_store(settings)
    try:
        await every_record_pushed_and_active(result, records, store)
    finally:
        await store.close()


def test_the_cli_reaches_the_master_and_every_sentinel_over_tls(
    tls_sentinel_topology: SentinelTopology, certs: Certs, tmp_path: Path
) -> None:
    run = cli_with(write_ha_config(tls_sentinel_topology, tmp_path, certs=certs))
    the_cli_pushes_and_shows_the_master_its_replica_and_every_sentinel(run, tls_sentinel_topology)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("no TLS", "Connection "),  # reset by peer, or closed by server
        ("sentinels not vouched for by our CA", "certificate verify failed"),
        ("a master name the sentinels do not watch", "no master 'elsewhere' that is up"),
    ],
)
async def test_sentinels_that_name_no_master_are_an_outage_that_says_what_each_answered_and_nothing_is_written(
    tls_sentinel_topology: SentinelTopology, certs: Certs, tmp_path: Path, case: str, reason: str
) -> None:
    settings = ha_settings(tls_sentinel_topology, tmp_path, certs=certs)
    redis = settings.redis
    if case == "no TLS":
        redis = dataclasses.replace(redis, tls=False, ca_file=None, cert_file=None, key_file=None)
    elif case == "sentinels not vouched for by our CA":
        redis = dataclasses.replace(redis, ca_file=str(Path(certs.ca).parent / "rogue-ca.pem"))
    else:
        redis = dataclasses.replace(redis, master_name="elsewhere")
    refused = open_ha_store(dataclasses.replace(settings, redis=redis))
    trusted = open_ha_store(settings)
    try:
        with pytest.raises(StoreUnavailable, match="no sentinel names a master") as raised:
            await refused.push_batch(make_records(3), source="test")
        for address in tls_sentinel_topology.sentinel_addresses:
            assert f"{address}: " in str(raised.value)
        assert str(raised.value).count(reason) == 3
        assert (await trusted.summary()).tracked == 0
    finally:
        await refused.close()
        await trusted.close()
