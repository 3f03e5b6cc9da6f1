"""A host that boots with ``dataq`` enabled (``systemctl enable dataq``, as ``make install-systemd`` says) runs
every configured daemon, with nothing else enabled. A module of its own, so that its container boots after the
other module's has been powered off, never beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_systemd import SETTINGS, SUITE, records
from tests.systemd_support import SystemdContainer, booted

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def booted_enabled(tmp_path: Path, dataq_venv: Path) -> Iterator[SystemdContainer]:
    yield from booted(tmp_path, dataq_venv, SETTINGS, enable=["dataq.service"])


def test_boot_with_dataq_enabled_starts_every_configured_daemon(booted_enabled: SystemdContainer) -> None:
    booted_enabled.wait_for("the suite to be up after boot", lambda: booted_enabled.active_units() >= SUITE)
    assert booted_enabled.failed_units() == set()
    report = booted_enabled.feed("raw-data", records("raw-data", 1, start=300))
    assert report.startswith("pushed 1, ignored 0, errors 0")
