"""rsync's runner gives the same outcome whether it starts the program through posix_spawn (the daemons' way) or
through asyncio's subprocess (a host without pidfds, or without setpriv to arm the parent-death signal)."""

from __future__ import annotations

import pytest

from dataq.actions import rsync as rsync_module
from dataq.errors import ActionError
from dataq.runtime import spawn
from tests.conftest import skip_on_other_os

pytestmark = skip_on_other_os("needs Linux's pidfd_open")


@pytest.fixture(params=["posix_spawn", "asyncio subprocess"])
def starter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(rsync_module, "dying_with_parent", lambda argv, signum: (argv, None))
    monkeypatch.setattr(spawn, "AVAILABLE", request.param == "posix_spawn")
    return str(request.param)


async def test_a_program_gives_its_status_and_output_however_it_was_started(starter: str) -> None:
    completed = await rsync_module.run_command(["sh", "-c", "echo out; echo err >&2; read line; exit 3"])
    assert completed == rsync_module.Completed(3, "out\n", "err\n"), f"{starter}: stdin is /dev/null"


async def test_a_program_that_is_not_there_is_an_action_error_naming_it(starter: str) -> None:
    with pytest.raises(ActionError, match="cannot run dataq-no-such-rsync"):
        await rsync_module.run_command(["dataq-no-such-rsync", "--version"])
