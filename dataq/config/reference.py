"""The configuration reference, rendered from the settings dataclasses themselves so that it cannot drift from them.

Every key's TOML table, type, bounds and default come from the fields of :class:`~dataq.config.schema.Settings`,
of the sections it holds (:class:`~dataq.config.queue_settings.QueueSettings` among them) and of the actions'
options given to :func:`render`; each key's description is the attribute docstring under its field, read from
the source with :mod:`ast` (Python keeps no such docstring at run time). A key without one is an error,
:class:`UndocumentedSetting`: the reference documents every key, or it is not built. The documentation site
renders it at build time (``docs/hooks/reference.py``); nothing generated is committed.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import textwrap
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dataq.config.loader import BOUNDS_KEY, FILLED, ROLE_KEY, SUB_TABLES
from dataq.config.schema import CONFIG_ENV, ENV_OVERRIDES, SYSTEM_CONFIG, Settings
from dataq.errors import ConfigError

__all__ = ["ActionDoc", "Key", "Table", "UndocumentedSetting", "action_tables", "render", "settings_tables"]

UNSET = "unset"
"""The default shown for a key whose default is None (TOML has no null: ``""`` or leaving the key out says it)."""
REQUIRED = "required"
"""The default shown for a key that has none."""
TOP_LEVEL = "Keys before the first table of the file."
NAMED_TABLE = "NAME"
"""Stands for the name of each table of a table of named tables (``[queues.NAME]``)."""
_TYPE_NAMES: Mapping[Any, tuple[str, str]] = {
    str: ("string", "strings"), int: ("integer", "integers"), float: ("number", "numbers"),
    bool: ("boolean", "booleans"),
}
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_ROLE = re.compile(r":([a-z]+):`(~?)([^`]+)`")
_ESCAPED = str.maketrans({"|": r"\|", "<": "&lt;", ">": "&gt;", "*": r"\*"})


class UndocumentedSetting(ConfigError):
    """A settings or options field the reference cannot describe: no docstring under it, a default it cannot
    name, or a type with no TOML form. A developer's mistake, reported at the build, never at run time."""


@dataclass(frozen=True, slots=True)
class Key:
    """One key of a table, as the reference shows it (markdown in every field)."""

    name: str
    type: str
    default: str
    description: str


@dataclass(frozen=True, slots=True)
class Table:
    """One TOML table and its keys; ``name`` is dotted (``push``, ``queues.NAME``), "" for the top level."""

    name: str
    summary: str
    keys: tuple[Key, ...]


@dataclass(frozen=True, slots=True)
class ActionDoc:
    """An action whose options go in ``[queues.NAME.<name>]``: dataq's actions know nothing of this module
    (they are built on it), so whoever renders the reference passes them in."""

    name: str
    options: type[Any]
    """The action's frozen dataclass of options (no fields: the action takes none)."""
    summary: str = ""
    """What the action does, in a sentence or two (its docstring's first paragraph)."""
    inline_option: str | None = None
    """The option ``name:argument`` in a queue's ``actions`` sets, if any."""


# --- reading the code ----------------------------------------------------------------------------------------


def _docs_in(body: Iterable[ast.stmt]) -> dict[str, str]:
    """Name -> the docstring under its assignment, for the assignments of a class's body."""
    docs: dict[str, str] = {}
    previous: str | None = None
    for node in body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if previous is not None:
                docs[previous] = inspect.cleandoc(node.value.value)
            previous = None
            continue
        previous = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            previous = node.target.id
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            previous = node.targets[0].id
    return docs


def field_docs(cls: type[Any]) -> Mapping[str, str]:
    """Field name -> its docstring, for ``cls`` and the dataclasses it derives from (a subclass's own win)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
            body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
            docs.update(_docs_in(body))
    return docs


def markdown(doc: str) -> str:
    """A docstring as one line of markdown: its ``literals`` as code, Sphinx roles as their last name, None as
    the reference's word for it, and what markdown or a table would take for syntax escaped."""
    text = _ROLE.sub(_role, " ".join(doc.split()))
    text = text.replace("``", "`")
    parts = _CODE_SPAN.split(text)
    return "".join(
        part if index % 2 else re.sub(r"\bNone\b", UNSET, part).translate(_ESCAPED)
        for index, part in enumerate(parts)
    )


def _role(match: re.Match[str]) -> str:
    """A Sphinx cross-reference as a code span: a module by its dotted path, anything else by its own name."""
    role, short, target = match.groups()
    return f"``{target.rsplit('.', 1)[-1] if short or role != 'mod' else target}``"


def _where(cls: type[Any], name: str) -> str:
    return f"{cls.__module__}.{cls.__qualname__}.{name}"


def _description(cls: type[Any], docs: Mapping[str, str], name: str) -> str:
    doc = docs.get(name)
    if not doc:
        raise UndocumentedSetting(f"{_where(cls, name)} has no docstring: document it under the field (the "
                                  "configuration reference is made of these docstrings)")
    return markdown(doc)


def _summary(cls: type[Any]) -> str:
    doc = cls.__doc__
    if not doc or doc.startswith(f"{cls.__name__}("):  # a dataclass without a docstring gets its signature
        raise UndocumentedSetting(f"{cls.__module__}.{cls.__qualname__} has no docstring: say what its table is")
    return markdown(doc)


# --- what a key is -------------------------------------------------------------------------------------------


def toml_literal(value: Any) -> str:
    """``value`` as TOML writes it (a default shown in the reference loads back as that default)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (tuple, list)):
        return f"[{', '.join(toml_literal(item) for item in value)}]"
    raise TypeError(f"{value!r} has no TOML form")


def _number(value: float) -> str:
    return f"{value:g}"


def type_name(tp: Any, bounds: Mapping[str, Any] | None = None) -> str:
    """A field's type in TOML's words, with its bounds (``integer ≥ 1``, ``string: one of ...``)."""
    bounds = bounds or {}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(type_name(arg, bounds) for arg in args if arg is not type(None))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _TYPE_NAMES:
        return f"list of {_TYPE_NAMES[args[0]][1]}"
    if tp not in _TYPE_NAMES:
        raise TypeError(f"type {tp!r} has no TOML form")
    text = _TYPE_NAMES[tp][0]
    if (choices := bounds.get("choices")) is not None:
        return f"{text}: one of {', '.join(f'`{choice}`' for choice in choices)}"
    ge, gt, le = bounds.get("ge"), bounds.get("gt"), bounds.get("le")
    if ge is not None and le is not None:
        return f"{text}, {_number(ge)} to {_number(le)}"
    limits = [f"≥ {_number(ge)}" if ge is not None else "", f"> {_number(gt)}" if gt is not None else "",
              f"≤ {_number(le)}" if le is not None else ""]
    return " ".join([text, *filter(None, limits)])


def default_text(cls: type[Any], spec: dataclasses.Field[Any]) -> str:
    """The default of a field as markdown: a TOML literal, ``unset``, ``required``, or what its factory
    computes (the factory's docstring when it is dataq's, else its call)."""
    if spec.default is not dataclasses.MISSING:
        return UNSET if spec.default is None else f"`{toml_literal(spec.default)}`"
    factory: Any = spec.default_factory
    if factory is dataclasses.MISSING:
        return REQUIRED
    name = getattr(factory, "__qualname__", "")
    if "<lambda>" in name:
        raise UndocumentedSetting(f"the default of {_where(cls, spec.name)} comes from a lambda: make it a named "
                                  "function whose docstring says what it gives")
    doc = inspect.getdoc(factory) if factory.__module__.startswith("dataq") else None
    return markdown(doc) if doc else f"`{name}()` at start-up"


# --- the tables ----------------------------------------------------------------------------------------------


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _dotted(table: str, name: str) -> str:
    return f"{table}.{name}" if table else name


def _walk(cls: type[Any], table: str, summary: str) -> Iterator[Table]:
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    keys: list[Key] = []
    inner: list[tuple[type[Any], str, str]] = []
    for spec in dataclasses.fields(cls):
        if not spec.init or spec.metadata.get(ROLE_KEY) in (FILLED, SUB_TABLES):
            continue  # not a key: filled by the loader, or the sub-tables of actions' options
        tp, dotted = hints[spec.name], _dotted(table, spec.name)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if _is_section(tp):
            inner.append((tp, dotted, _summary(tp)))
        elif origin is Mapping and len(args) == 2 and _is_section(args[1]):  # a table of named tables
            named = args[1]
            text = f"{_summary(named)} {_description(cls, docs, spec.name)}"
            if "name" in (named_docs := field_docs(named)):
                text += f"\n\n`{NAMED_TABLE}`: {_description(named, named_docs, 'name')}"
            inner.append((named, f"{dotted}.{NAMED_TABLE}", text))
        else:
            try:
                kind = type_name(tp, spec.metadata.get(BOUNDS_KEY))
                default = default_text(cls, spec)
            except TypeError as exc:
                raise UndocumentedSetting(f"{_where(cls, spec.name)}: {exc}") from exc
            keys.append(Key(spec.name, kind, default, _description(cls, docs, spec.name)))
    yield Table(table, summary, tuple(keys))
    for section, name, text in inner:
        yield from _walk(section, name, text)


def settings_tables(settings: type[Any] = Settings) -> list[Table]:
    """Every table of the settings, the top level first, in the order of the fields that hold them."""
    return list(_walk(settings, "", TOP_LEVEL))


def action_tables(actions: Iterable[ActionDoc], queue_table: str = f"queues.{NAMED_TABLE}") -> list[Table]:
    """The options table ``[queues.NAME.ACTION]`` of each action that has options."""
    found: list[Table] = []
    for action in actions:
        if not dataclasses.fields(action.options):
            continue
        summary = markdown(action.summary)
        if action.inline_option is not None:
            summary += (f"\n\nInline: `{action.name}:{action.inline_option.upper()}` in a queue's `actions` "
                        f"sets `{action.inline_option}`.")
        found.extend(_walk(action.options, f"{queue_table}.{action.name}", summary))
    return found


# --- markdown ------------------------------------------------------------------------------------------------

INTRO = """\
Generated from the settings' code (`dataq/config/`) and the options of dataq's own actions each time the
documentation is built, so it says what the code of this version accepts. `config/dataq.toml` is an annotated
example of the same keys.

Unknown or mistyped keys are errors naming the file, the key and what was expected. TOML has no null: in a key
whose default is *unset*, `""` means unset too. An integer is accepted where a number is expected."""


def anchor(table: str) -> str:
    """The id of a table's heading: ``push``, ``queues-name``, ``queues-name-disk_store``."""
    return table.lower().replace(".", "-") or "top-level"


def _cell(text: str) -> str:
    return text.replace("\n\n", "<br><br>")


def table_markdown(table: Table, level: int = 2) -> str:
    """One table as a heading (with the id :func:`anchor` gives it), its summary, and a row per key."""
    title = f"`[{table.name}]`" if table.name else "Top-level keys"
    lines = [f"{'#' * level} {title} {{ #{anchor(table.name)} }}", "", table.summary, ""]
    if table.keys:
        lines += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        lines += [f"| `{key.name}` | {key.type} | {_cell(key.default)} | {key.description} |" for key in table.keys]
        lines.append("")
    return "\n".join(lines)


def _environment(tables: Sequence[Table]) -> str:
    rows = {_dotted(table.name, key.name): key for table in tables for key in table.keys}
    lines = ["## Environment overrides { #environment }", "",
             "Applied after the file, each checked as the key it sets (an error names the variable).", "",
             "| variable | overrides | what the key is |", "| --- | --- | --- |"]
    for variable, key in ENV_OVERRIDES.items():
        if key not in rows:
            raise UndocumentedSetting(f"{variable} overrides {key!r}, which the reference has no row for")
        table, _, _ = key.rpartition(".")
        lines.append(f"| `{variable}` | [`{key}`](#{anchor(table)}) | {rows[key].description} |")
    return "\n".join([*lines, ""])


def render(settings: type[Any] = Settings, actions: Iterable[ActionDoc] = ()) -> str:
    """The whole reference page, in markdown; raises :class:`UndocumentedSetting` for a key it cannot describe."""
    tables = settings_tables(settings)
    actions = list(actions)
    parts = ["# Configuration reference", "", INTRO, "",
             "## Which file { #which-file }", "",
             f"One TOML file: `--config FILE`, else `${CONFIG_ENV}` (set and empty: no file at all), else "
             f"`{SYSTEM_CONFIG}` when it exists (the system's, which `make install-systemd` installs and the "
             "systemd units read), else none: every default below.", "",
             _environment(tables)]
    parts += [table_markdown(table) for table in tables]
    if actions:
        bare = [f"`{action.name}`" for action in actions if not dataclasses.fields(action.options)]
        parts += ["## Options of dataq's actions { #actions }", "",
                  f"An action's options go in the sub-table of its queue named after it, `[queues.{NAMED_TABLE}."
                  "ACTION]`, and the action must be in that queue's `actions`; they are checked when a pop daemon "
                  "starts." + (f" {', '.join(bare)} take no options." if bare else ""), ""]
        parts += [table_markdown(table, level=3) for table in action_tables(actions)]
    return "\n".join(parts)
