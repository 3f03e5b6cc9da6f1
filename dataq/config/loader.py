"""How a settings section is declared and checked, and the one generic loader that fills any section from a
TOML table (or from an action's options): unknown keys are errors with a suggestion, values are converted and
checked against their field's type and bounds, and every error names the file (or environment variable) and the
dotted key. :mod:`dataq.config.schema` declares dataq's sections with it; actions declare their options with
plain dataclasses that :func:`load_options` fills.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from dataq.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

BOUNDS_KEY, ROLE_KEY = "dataq.bounds", "dataq.role"  # field metadata keys
FILLED = "filled"  # role of a field the loader fills, not a config key (a queue's name, the source file)
SUB_TABLES = "sub_tables"  # role of the field that gets the sub-tables not named after a field
S = TypeVar("S", bound="DataclassInstance")


class Invalid(ConfigError):
    """A section rejected a value; ``key`` is relative to the section's table.

    ``template`` holds ``{key}`` for the full dotted key and ``{table}.`` before a sibling key; the loader fills
    them in, as it knows where the table is.
    """

    def __init__(self, key: str, template: str) -> None:
        super().__init__(self.render(key, template, ""))
        self.key, self.template = key, template

    @staticmethod
    def render(key: str, template: str, table: str) -> str:
        return template.replace("{table}.", f"{table}." if table else "").replace("{key}", key)


def setting(default: Any, **bounds: Any) -> Any:
    """A field with a default and bounds: ``ge``, ``gt``, ``le`` (numbers) or ``choices`` (a tuple)."""
    return field(default=default, metadata={BOUNDS_KEY: bounds})


def _problem(value: Any, ge: float | None = None, gt: float | None = None, le: float | None = None,
             choices: tuple[str, ...] | None = None) -> str | None:
    if choices is not None and value not in choices:
        return f"must be one of {', '.join(choices)}; got {value!r}"
    if not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if ge is not None and le is not None and not ge <= value <= le:
        return f"must be between {ge} and {le}, got {value}"
    if ge is not None and value < ge:
        return f"must be at least {ge}, got {value}"
    if gt is not None and value <= gt:
        return f"must be greater than {gt}, got {value}"
    return None


class Section:
    """Base of the settings dataclasses: construction checks each field's bounds, then the section's rules."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(typing.cast("DataclassInstance", self)):
            value = getattr(self, f.name) if f.init else None
            if value == "" and f.default is None:
                object.__setattr__(self, f.name, None)  # "" is how TOML says "not set"
            elif value is not None and (problem := _problem(value, **f.metadata.get(BOUNDS_KEY, {}))):
                raise Invalid(f.name, "key '{key}' " + problem)
        self._check()

    def _check(self) -> None:
        """Rules over several fields, and normalisation; none by default."""


def together(section: object, first: str, second: str) -> None:
    if (getattr(section, first) is None) != (getattr(section, second) is None):
        raise Invalid(first, f"keys '{{key}}' and '{{table}}.{second}' must be given together")


def absolute(value: str | None, key: str) -> None:
    if value is not None and not os.path.isabs(value):
        raise Invalid(key, f"key '{{key}}' must be an absolute path, got {value!r}")


def freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


# --- loading: one generic walk over a section's fields ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Origins:
    """Where values came from, so an error names the file, environment variable or option to fix."""

    source: str | None
    overridden: Mapping[str, str]
    """Dotted key -> what set it instead of the file: ``environment variable DATAQ_...`` or ``option --...``."""

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.overridden.get(key) or self.source or 'settings'}: {message}")


def read_toml(source: str) -> dict[str, Any]:
    try:
        with open(source, "rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the settings file: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from exc


def load_section(cls: type[S], table: Mapping[str, Any], prefix: str, origins: Origins,
                  filled: Mapping[str, Any]) -> S:
    """Build section ``cls`` from its TOML ``table``: check every key and type, then let ``cls`` validate."""
    hints, all_fields = typing.get_type_hints(cls), dataclasses.fields(cls)
    keys = [f.name for f in all_fields if f.init and ROLE_KEY not in f.metadata]
    sub_tables = next((f.name for f in all_fields if f.metadata.get(ROLE_KEY) == SUB_TABLES), None)
    kwargs: dict[str, Any] = dict(filled)
    extra: dict[str, Any] = {}
    for name, value in table.items():
        key = f"{prefix}.{name}" if prefix else name
        if name in keys:
            kwargs[name] = _convert(hints[name], value, key, origins)
        elif sub_tables is not None and isinstance(value, dict):
            extra[name] = value
        else:
            close = difflib.get_close_matches(name, keys, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"the keys here are: {', '.join(keys)}"
            raise origins.error(key, f"unknown key {key!r}; {hint}")
    if sub_tables is not None:
        kwargs[sub_tables] = extra
    try:
        return cls(**kwargs)
    except Invalid as exc:
        key = f"{prefix}.{exc.key}" if prefix else exc.key
        raise origins.error(key, Invalid.render(key, exc.template, prefix)) from exc


_EXPECTED = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}
_PLURAL = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}


def _convert(tp: Any, value: Any, key: str, origins: Origins) -> Any:
    """Check a TOML ``value`` against the field type ``tp``; sections and tables of sections recurse."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [arg for arg in args if arg is not type(None)]
        if value == "" and type(None) in args:
            return None
        if len(inner) > 1:  # a choice of plain types (``remove_source``: a boolean or a string)
            for choice in inner:
                if isinstance(value, bool) == (choice is bool) and isinstance(value, choice):
                    return value
            raise origins.error(key, f"key {key!r} must be {' or '.join(_EXPECTED[tp] for tp in inner)}, "
                                     f"got {_describe(value)}")
        return _convert(inner[0], value, key, origins)
    if isinstance(value, str) and key in origins.overridden and tp in (int, float):
        with contextlib.suppress(ValueError):  # text that does not parse is reported below, as text
            value = tp(value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return load_section(tp, _table(value, key, origins), key, origins, {})
    if origin is Mapping:  # a table of named sections ([queues.NAME]): each table's name fills the `name` field
        return {
            name: load_section(args[1], _table(item, f"{key}.{name}", origins), f"{key}.{name}", origins,
                                {"name": name})
            for name, item in _table(value, key, origins).items()
        }
    if origin is tuple:
        if not isinstance(value, list):
            raise origins.error(key, f"key {key!r} must be a list of {_PLURAL[args[0]]}, got {_describe(value)}")
        return tuple(_convert(args[0], item, f"{key}[{index}]", origins) for index, item in enumerate(value))
    if isinstance(value, bool) != (tp is bool) or not isinstance(value, (int, float) if tp is float else tp):
        raise origins.error(key, f"key {key!r} must be {_EXPECTED[tp]}, got {_describe(value)}")
    return float(value) if tp is float else value


def _table(value: Any, key: str, origins: Origins) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise origins.error(key, f"key {key!r} must be a table, got {_describe(value)}")
    return value


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    kind = {int: "integer", float: "float", str: "string", list: "array", dict: "table"}.get(type(value))
    if kind in ("array", "table"):
        return str(kind)
    return f"{kind or type(value).__name__} {value!r}"


def load_options(cls: type[S], table: Mapping[str, Any], key_prefix: str, source: str | None) -> S:
    """Build the options dataclass ``cls`` of a plugin (an action) from its raw TOML ``table``, checked like a section.

    Unknown keys and wrong types raise ConfigError naming ``source``, the key under ``key_prefix`` (e.g.
    ``queues.transfer.disk_store.root``) and what was expected. Frozen tables and arrays (as kept in
    :attr:`QueueSettings.action_options`) are accepted.
    """
    origins = Origins(source, {})
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.init and required and f.name not in table:
            raise origins.error(f"{key_prefix}.{f.name}", f"missing key '{key_prefix}.{f.name}'")
    try:
        return load_section(cls, _thaw(table), key_prefix, origins, {})
    except (TypeError, ValueError) as exc:  # a plain dataclass's own __post_init__ refused a value
        raise origins.error(key_prefix, f"{key_prefix}: {exc}") from exc


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value
