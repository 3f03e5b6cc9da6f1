"""Actions: the registry that builds them from settings, their options and timeouts, the test actions."""

from __future__ import annotations

import asyncio
import importlib.metadata
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from dataq.actions import Action, NoOptions, load_actions
from dataq.actions import registry as registry_module
from dataq.actions.registry import resolve
from dataq.actions.testing import EchoAction, FailAction, NoopAction, SleepAction, marks
from dataq.config import QueueSettings, Settings
from dataq.errors import ActionError, ConfigError
from dataq.ops.notices import LogNotifier
from dataq.pop.worker import PopWorker, running_at_once
from dataq.record import Record
from testbed.actions import action_context, fake_store
from tests.helpers import make_records
from tests.pop_support import FailSomeAction, FailSomeOptions

SOURCE = "/etc/dataq/dataq.toml"


def settings_with(actions: tuple[str, ...], options: dict[str, dict[str, Any]] | None = None,
                  **queue: Any) -> Settings:
    transfer = QueueSettings("transfer", actions=actions, action_options=options or {}, **queue)
    return Settings(queues={"transfer": transfer}, source=SOURCE)


def build(
    actions: tuple[str, ...], options: dict[str, dict[str, Any]] | None = None, **queue: Any
) -> list[Action[Any]]:
    settings = settings_with(actions, options, **queue)
    return load_actions(action_context(settings.queue("transfer")), settings.source)


def config_error(actions: tuple[str, ...], options: dict[str, dict[str, Any]] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        build(actions, options)
    return str(info.value)


def test_builtin_actions_are_built_in_order_with_their_options() -> None:
    echo, sleep, fail = build(("echo", "sleep", "fail"), {"fail": {"message": "no disk"}})
    assert (type(echo), type(sleep), type(fail)) == (EchoAction, SleepAction, FailAction)
    assert echo.options == NoOptions()
    assert sleep.options.seconds == 1.0
    assert fail.options.message == "no disk"


def test_dataqs_own_actions_are_found_by_name_without_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "entry_points", lambda group: [])
    assert resolve("sleep").cls is SleepAction
    assert resolve("disk_store").cls.__name__ == "DiskStoreAction"
    assert resolve("archive_ingest").cls.__name__ == "ArchiveIngestAction"  # importing it needs no pyspark
    points = {ep.name for ep in importlib.metadata.entry_points(group="dataq.actions")}
    assert not points & set(registry_module.BUILTIN), "the entry-point group is for a site's actions only"


def test_a_batching_action_gets_enough_records_at_once_to_fill_its_batches(tmp_path: Path) -> None:
    moved = build(("network_move", "disk_store", "noop"), {"network_move": {"destination": str(tmp_path)},
                                                           "disk_store": {"root": str(tmp_path), "batch_size": 300}})
    assert [action.records_at_once() for action in moved] == [400, 200, 0], \
        "four rsync batches, two disk ones, full; of 100 at most while the records' sizes are not known"
    assert running_at_once(4, moved) == 400, "the default [pop] concurrency is raised to the largest need"
    assert running_at_once(1000, moved) == 1000, "a larger concurrency stays"
    assert running_at_once(4, build(("noop",))) == 4, "per-record actions run [pop] concurrency at once"


class Growing(Action[NoOptions]):
    """Needs as many records at once as the test says (as ``network_move`` once its batches grew)."""

    name = "growing"
    need = 8

    def records_at_once(self) -> int:
        return self.need


async def test_a_worker_runs_more_records_at_once_once_its_action_needs_more() -> None:
    action = Growing(NoOptions(), action_context())

    async def register() -> None:
        return None

    worker = PopWorker(fake_store(), "host:1:pop:a", QueueSettings("transfer"), [action], 4, LogNotifier(), register)
    assert worker.free_slots() == 8
    action.need = 4000
    assert worker.free_slots() == 4000 and worker.concurrency == 4000
    action.need = 2
    assert worker.free_slots() == 4, "never below [pop] concurrency"


@dataclass(frozen=True)
class CompressingOptions:
    algorithm: str = "zstd"


class CompressingAction(Action[CompressingOptions]):
    Options = CompressingOptions


def test_a_sites_action_may_have_an_option_named_algorithm_on_a_queue_of_another_checksum(tmp_path: Path) -> None:
    (action,) = build((f"{__name__}:CompressingAction",), checksum="xxh128")
    assert action.options.algorithm == "zstd" and action.algorithm == "xxh128"
    with pytest.raises(ConfigError, match="checksum algorithm 'sha256' is not the queue's checksum 'xxh128'"):
        build(("disk_store",), {"disk_store": {"root": str(tmp_path), "algorithm": "sha256"}}, checksum="xxh128")


def test_an_inline_argument_sets_the_option_the_action_names() -> None:
    (sleep,) = build(("sleep:0.25",))
    assert sleep.options.seconds == 0.25
    (fail,) = build(("fail:disk-full",))
    assert fail.options.message == "disk-full"


def test_an_action_is_found_by_import_path_with_its_options_table() -> None:
    (imported,) = build(("tests.pop_support:FailSomeAction",),
                        {"tests.pop_support:FailSomeAction": {"dir": "/tmp/m", "ids": ["a"]}})
    assert isinstance(imported, FailSomeAction)
    assert imported.options == FailSomeOptions(dir="/tmp/m", ids=("a",))


def test_the_timeout_is_the_actions_own_option_else_the_queues() -> None:
    own, default = build(("sleep", "echo"), {"sleep": {"timeout": 3}}, action_timeout=42.0)
    assert (own.timeout, default.timeout) == (3.0, 42.0)
    (unset,) = build(("sleep",), action_timeout=7.0)
    assert unset.timeout == 7.0


@pytest.mark.parametrize(
    ("actions", "options", "message"),
    [
        (("nope",), None, "queues.transfer.actions: unknown action 'nope'; the actions installed are: "),
        (("sleep:soon",), None, "queues.transfer.actions: in 'sleep:soon', 'soon' is not a valid seconds"),
        (("echo:loud",), None, "action 'echo' takes no inline argument (in 'echo:loud')"),
        (("sleep:1",), {"sleep": {"seconds": 2}}, "'sleep:1' and queues.transfer.sleep.seconds both set 'seconds'"),
        (("sleep",), {"sleep": {"second": 2}}, "unknown key 'queues.transfer.sleep.second'; did you mean 'seconds'?"),
        (("sleep",), {"sleep": {"seconds": "2"}}, "key 'queues.transfer.sleep.seconds' must be a number"),
        (("sleep",), {"sleep": {"seconds": -1}}, "queues.transfer.sleep: seconds must be a finite number >= 0"),
        (("echo",), {"echo": {"x": 1}}, "unknown key 'queues.transfer.echo.x'"),
        (("tests.pop_support:FailSomeAction",), None,
         "missing key 'queues.transfer.tests.pop_support:FailSomeAction.dir'"),
        (("no_such_module_x:Thing",), None, "unknown action 'no_such_module_x:Thing': no action named"),
        (("tests.pop_support:Nothing",), None, "module 'tests.pop_support' has no 'Nothing'"),
        (("tests.helpers:make_records",), None, "tests.helpers:make_records is not a subclass of dataq.actions.Action"),
    ],
)
def test_every_mistake_is_a_config_error_at_start_up_naming_the_file_and_key(
    actions: tuple[str, ...], options: dict[str, dict[str, Any]] | None, message: str
) -> None:
    error = config_error(actions, options)
    assert error.startswith(f"{SOURCE}: ")
    assert message in error


def test_the_unknown_action_error_lists_the_actions_a_site_can_use() -> None:
    listed = config_error(("nope",)).split("the actions installed are: ")[1]
    assert {"echo", "fail", "noop", "sleep"} <= set(listed.split(" (")[0].split(", "))


def test_an_options_table_that_no_entry_uses_is_an_error() -> None:
    # 'tests.pop_support' is a prefix of the entry, which the settings accept; no action takes it, though.
    message = config_error(("tests.pop_support:FailSomeAction:x",), {"tests.pop_support": {}})
    assert "queues.transfer.tests.pop_support: options for 'tests.pop_support', which names no action here" in message


class OtherEcho(Action[NoOptions]):
    name = "echo"


def test_an_entry_point_that_shadows_a_builtin_with_another_class_is_ambiguous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    point = EntryPoint(name="echo", value=f"{__name__}:OtherEcho", group="dataq.actions")
    monkeypatch.setattr(registry_module, "entry_points", lambda group: [point] if group == "dataq.actions" else [])
    assert "action name 'echo' is ambiguous" in config_error(("echo",))


def test_a_sites_entry_point_adds_an_action_and_a_broken_one_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [
        EntryPoint(name="mirror", value=f"{__name__}:Mirror", group="dataq.actions"),
        EntryPoint(name="broken", value="no_such_module_y:Broken", group="dataq.actions"),
    ]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: points)
    (mirror,) = build(("mirror",), {"mirror": {"hosts": ["a", "b"]}})
    assert isinstance(mirror, Mirror) and mirror.options.hosts == ("a", "b")
    assert "action 'broken' (no_such_module_y:Broken) cannot be loaded" in config_error(("broken",))


@dataclass(frozen=True, slots=True)
class MirrorOptions:
    hosts: tuple[str, ...] = ()


class Mirror(Action[MirrorOptions]):
    name = "mirror"
    Options = MirrorOptions


async def test_the_shipped_test_actions_do_what_they_say() -> None:
    (record,) = make_records(1)
    echo, noop, sleep, fail = build(("echo", "noop", "sleep:0.05", "fail"))
    for action in (echo, noop, sleep, fail):
        await action.start()
    await echo.run(record)
    await noop.run(record)
    started = asyncio.get_running_loop().time()
    await sleep.run(record)
    assert asyncio.get_running_loop().time() - started >= 0.04
    with pytest.raises(ActionError, match="failed on purpose"):
        await fail.run(record)
    for action in (echo, noop, sleep, fail):
        await action.close()
    assert NoopAction.name == "noop"


async def test_mark_leaves_a_file_per_run_that_marks_reads_back_in_run_order(tmp_path: Path) -> None:
    (mark,) = build(("mark",), {"mark": {"dir": str(tmp_path)}})
    await mark.start()
    first, second = make_records(2)
    odd = Record(path="/data/x", checksum="a/b c", size=1)  # a checksum pattern may allow such an id
    for record in (first, second, first, odd):
        await mark.run(record)
    assert marks(tmp_path) == [first.id, second.id, first.id, "a/b c"]


def test_mark_wants_an_existing_absolute_directory(tmp_path: Path) -> None:
    assert "dir must be an absolute path" in config_error(("mark",), {"mark": {"dir": "relative"}})
    (mark,) = build(("mark",), {"mark": {"dir": str(tmp_path / "missing")}})
    with pytest.raises(ActionError, match="is not a directory"):
        asyncio.run(mark.start())
