"""Settings: entries of a queue's ``actions`` list with an inline argument or an import path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from dataq.config import QueueSettings, load_settings
from dataq.config.loader import load_options
from dataq.errors import ConfigError


def load_queue(tmp_path: Path, text: str) -> QueueSettings:
    path = tmp_path / "dataq.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, environ={"HOME": "/home/op"}).queue("transfer")


def test_an_action_may_carry_an_inline_argument_or_be_an_import_path(tmp_path: Path) -> None:
    queue = load_queue(tmp_path, '[queues.transfer]\nactions = ["sleep:0.5", "site.actions:Mover", "x.y:Z:arg-1"]\n')
    assert queue.actions == ("sleep:0.5", "site.actions:Mover", "x.y:Z:arg-1")


@pytest.mark.parametrize("entry", [":0.5", "sleep:", "a b", "sleep:0 5", "sleep:/tmp", "x" * 129])
def test_a_malformed_action_entry_is_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match="holds an invalid action name"):
        QueueSettings("transfer", actions=(entry,))


def test_options_are_named_after_the_entry_without_its_inline_argument(tmp_path: Path) -> None:
    queue = load_queue(
        tmp_path,
        '[queues.transfer]\nactions = ["sleep:0.5", "site.actions:Mover"]\n'
        '[queues.transfer.sleep]\ntimeout = 2\n[queues.transfer."site.actions:Mover"]\nroot = "/srv"\n',
    )
    assert dict(queue.action_options["sleep"]) == {"timeout": 2}
    assert dict(queue.action_options["site.actions:Mover"]) == {"root": "/srv"}
    with pytest.raises(ConfigError, match="options for action 'slee', which is not in"):
        QueueSettings("transfer", actions=("sleep:0.5",), action_options={"slee": {}})


@dataclass(frozen=True, slots=True)
class Options:
    root: str
    hosts: tuple[str, ...] = ()
    retries: int = 3
    timeout: float | None = None


def test_load_options_builds_typed_options_from_a_frozen_table() -> None:
    queue = QueueSettings("transfer", actions=("mover",), action_options={"mover": {"root": "/srv", "hosts": ["a"]}})
    options = load_options(Options, queue.action_options["mover"], "queues.transfer.mover", "/etc/dataq.toml")
    assert options == Options(root="/srv", hosts=("a",))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "/etc/dataq.toml: missing key 'queues.transfer.mover.root'"),
        ({"root": "/srv", "retrys": 1}, "unknown key 'queues.transfer.mover.retrys'; did you mean 'retries'?"),
        ({"root": "/srv", "retries": "3"}, "key 'queues.transfer.mover.retries' must be an integer, got string '3'"),
        ({"root": "/srv", "timeout": True}, "key 'queues.transfer.mover.timeout' must be a number, got boolean true"),
    ],
)
def test_load_options_names_the_file_and_the_key_of_every_mistake(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_options(Options, table, "queues.transfer.mover", "/etc/dataq.toml")
    assert str(info.value).endswith(message)
    assert str(info.value).startswith("/etc/dataq.toml: ")
