"""The daemons run on uvloop when it is installed (the default install has it), on asyncio's loop otherwise."""

from __future__ import annotations

import asyncio
import gc
import importlib
from typing import Any

import pytest

from dataq.runtime import loop


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_a_daemon_runs_on_uvloop_when_it_is_installed() -> None:
    assert loop.run_daemon(loop_module()).startswith("uvloop")


def test_without_uvloop_a_daemon_runs_on_asyncios_own_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = importlib.import_module

    def no_uvloop(name: str, *args: Any) -> Any:
        if name == "uvloop":
            raise ImportError("No module named 'uvloop'")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_uvloop)
    assert loop.run_daemon(loop_module()).startswith("asyncio")


def test_the_daemon_returns_what_its_main_coroutine_returns_and_raises_what_it_raises() -> None:
    async def answer() -> int:
        return 42

    async def broken() -> None:
        raise ValueError("boom")

    assert loop.run_daemon(answer()) == 42
    with pytest.raises(ValueError, match="boom"):
        loop.run_daemon(broken())


def test_a_daemon_runs_with_start_up_frozen_and_young_objects_collected_less_often() -> None:
    async def collector() -> tuple[int, int]:
        return gc.get_freeze_count(), gc.get_threshold()[0]

    before = gc.get_threshold(), gc.get_freeze_count()
    frozen, young = loop.run_daemon(collector())
    assert frozen > 0, "what start-up made is left out of the collector's scans"
    assert young == loop.YOUNG_COLLECTION_AFTER
    assert (gc.get_threshold(), gc.get_freeze_count()) == before, "the process's collector is as it was after"
