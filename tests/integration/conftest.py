"""Fixtures of the transfer tests: the valley's directory and an ``rsync --daemon`` serving it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.rsync import RsyncDaemon, rsync_daemon


@pytest.fixture
def valley(tmp_path: Path) -> Path:
    return tmp_path / "valley"


@pytest.fixture
def daemon(tmp_path: Path, valley: Path) -> Iterator[RsyncDaemon]:
    with rsync_daemon(tmp_path / "rsyncd", {"valley": valley}) as running:
        yield running
