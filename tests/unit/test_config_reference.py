"""The configuration reference: rendered from the settings' code, it names every key of every table with its type,
default and description, and refuses to be built around a key nobody documented."""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dataq.actions.registry import BUILTIN, resolve
from dataq.config import ENV_OVERRIDES, Settings
from dataq.config.loader import FILLED, ROLE_KEY, SUB_TABLES, Section, setting
from dataq.config.reference import ActionDoc, UndocumentedSetting, markdown, render

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "dataq.toml"
ROW = re.compile(r"^\| `(?P<key>[^`]+)` \| (?P<type>[^|]+) \| (?P<default>.+?) \| (?P<description>.+) \|$")
HEADING = re.compile(r"^#{2,3} `\[(?P<table>[^\]]+)\]`|^## Top-level keys")


def builtin_actions() -> list[ActionDoc]:
    return [ActionDoc(name, resolve(name).cls.Options, resolve(name).cls.__doc__ or "") for name in BUILTIN]


def tables(text: str) -> dict[str, dict[str, dict[str, str]]]:
    """Table name ("" for the top level) -> key -> its row's cells, read back from the rendered markdown."""
    found: dict[str, dict[str, dict[str, str]]] = {}
    current: dict[str, dict[str, str]] | None = None
    for line in text.splitlines():
        if heading := HEADING.match(line):
            current = found.setdefault(heading.group("table") or "", {})
        elif line.startswith("## "):
            current = None
        elif current is not None and (row := ROW.match(line)):
            current[row.group("key")] = row.groupdict()
    return found


def leaf_keys(cls: type[Any], table: str = "") -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """(table, field) of every key a settings file may set, walking the sections as the loader does."""
    hints = typing.get_type_hints(cls)
    for spec in dataclasses.fields(cls):
        if not spec.init or spec.metadata.get(ROLE_KEY) in (FILLED, SUB_TABLES):
            continue
        tp, dotted = hints[spec.name], f"{table}.{spec.name}".lstrip(".")
        if dataclasses.is_dataclass(tp):
            yield from leaf_keys(typing.cast(type, tp), dotted)
        elif typing.get_origin(tp) is Mapping:
            yield from leaf_keys(typing.get_args(tp)[1], f"{dotted}.NAME")
        else:
            yield table, spec


def shown_default(cell: str) -> Any:
    """The value a default cell shows: the TOML literal between its backticks, loaded as TOML would."""
    assert cell.startswith("`") and cell.endswith("`"), cell
    return tomllib.loads(f"value = {cell[1:-1]}")["value"]


def assert_shows_default(row: dict[str, str], spec: dataclasses.Field[Any]) -> None:
    if spec.default is None:
        assert row["default"] == "unset"
    elif spec.default is not dataclasses.MISSING:
        expected = list(spec.default) if isinstance(spec.default, tuple) else spec.default
        assert shown_default(row["default"]) == expected, (spec.name, row["default"])
    elif spec.default_factory is dataclasses.MISSING:
        assert row["default"] == "required"
    else:
        assert row["default"].strip(), spec.name


@pytest.fixture(scope="module")
def reference() -> dict[str, dict[str, dict[str, str]]]:
    return tables(render(actions=builtin_actions()))


def test_every_key_of_every_section_is_in_its_table_with_its_default(reference: Mapping[str, Any]) -> None:
    keys = list(leaf_keys(Settings))
    assert len(keys) > 90  # every section was walked, the queue's table too
    for table, spec in keys:
        assert spec.name in reference[table], f"[{table}] {spec.name} is missing from the reference"
        row = reference[table][spec.name]
        assert row["type"].strip() and row["description"].strip()
        assert_shows_default(row, spec)


def test_known_keys_read_as_an_operator_needs_them(reference: Mapping[str, Any]) -> None:
    batch_max = reference["push"]["batch_max"]
    assert (batch_max["type"], batch_max["default"]) == ("integer ≥ 1", "`1000`")
    assert batch_max["description"] == "Most records written in one group commit."
    assert reference["push"]["port"]["type"] == "integer, 0 to 65535"
    assert reference["redis"]["appendfsync"]["type"] == "string: one of `always`, `everysec`, `no`"
    assert reference["queues.NAME"]["actions"]["default"] == '`["echo"]`'
    assert "gethostname" in reference[""]["site"]["default"]
    assert "~/.local/state/dataq" in reference[""]["data_dir"]["default"]


def test_every_option_of_dataqs_own_actions_is_in_its_table(reference: Mapping[str, Any]) -> None:
    for action in builtin_actions():
        for table, spec in leaf_keys(action.options, f"queues.NAME.{action.name}"):
            assert spec.name in reference[table], f"[{table}] {spec.name} is missing from the reference"
            assert_shows_default(reference[table][spec.name], spec)
    assert reference["queues.NAME.network_move"]["destination"]["default"] == "required"
    assert reference["queues.NAME.network_move"]["batch_size"]["default"] == "`100`"  # inherited from BatchOptions
    assert reference["queues.NAME.disk_store"]["batch_size"]["default"] == "`1000`"  # its own


def test_every_environment_override_names_the_key_it_sets() -> None:
    text = render()
    for variable, key in ENV_OVERRIDES.items():
        assert re.search(rf"^\| `{variable}` \| \[`{re.escape(key)}`\]\(#[a-z-]+\) \|", text, re.MULTILINE), variable


@dataclass(frozen=True, slots=True)
class Undocumented(Section):
    """A section with one key nobody described."""

    described: int = setting(1, ge=0)
    """This one is."""
    forgotten: str = "x"


@dataclass(frozen=True, slots=True)
class SettingsWithAGap(Section):
    """Settings holding the section above."""

    gap: Undocumented = field(default_factory=Undocumented)


@dataclass(frozen=True, slots=True)
class OptionsWithAGap:
    """An action's options with one undocumented option."""

    root: str
    """Where."""
    layout: str = "{name}"


def test_a_key_without_a_docstring_stops_the_reference() -> None:
    with pytest.raises(UndocumentedSetting, match=r"test_config_reference\.Undocumented\.forgotten has no docstring"):
        render(SettingsWithAGap)
    with pytest.raises(UndocumentedSetting, match=r"OptionsWithAGap\.layout has no docstring"):
        render(actions=[ActionDoc("gap", OptionsWithAGap)])


def test_docstrings_become_one_line_of_markdown() -> None:
    doc = "Uses ``x`` and :class:`~dataq.config.Settings`\n(None: ``<data_dir>/log``, else <data_dir> | *)."
    assert markdown(doc) == r"Uses `x` and `Settings` (unset: `<data_dir>/log`, else &lt;data_dir&gt; \| \*)."


def example_keys(example: Mapping[str, Any]) -> Iterator[tuple[str, str, str, Any]]:
    """(table in the file, table in the reference, key, value) of every key the example file sets."""
    for name, value in example.items():
        if name == "queues":
            for queue, keys in value.items():
                yield from ((f"queues.{queue}", "queues.NAME", key, item) for key, item in keys.items())
        elif isinstance(value, dict):
            yield from ((name, name, key, item) for key, item in value.items())
        else:
            yield "", "", name, value


def test_the_example_settings_file_agrees_with_the_reference(reference: Mapping[str, Any]) -> None:
    example = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    # The example sets data_dir to the system's, and shows a second queue unlike the first, on purpose.
    checked = 0
    for table, documented, key, value in example_keys(example):
        if (table, key) == ("", "data_dir") or table == "queues.submit":
            continue
        row = reference[documented][key]
        shown = "" if row["default"] == "unset" else shown_default(row["default"])  # "": TOML's way to say unset
        assert value == shown, f"config/dataq.toml: [{table}] {key} = {value!r}, the reference says {row['default']}"
        checked += 1
    assert checked > 80
