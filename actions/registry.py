"""Finding actions by name and building them from a queue's settings, so every mistake shows at start-up.

An entry of a queue's ``actions`` list is one of:

* ``name``: one of dataq's own actions (:data:`BUILTIN`) or one a site installs under the entry-point group
  ``dataq.actions`` (``[options.entry_points] dataq.actions = tape = site.actions:TapeStore``);
* ``name:argument``: the same, with an inline argument for the option the action names in ``inline_option``
  (``sleep:0.5``);
* ``module:Class`` (optionally ``module:Class:argument``): an Action subclass imported by path, for a site's
  action that is not packaged (and for tests).

The options of an entry come from the table named after it without its argument (``[queues.transfer.sleep]``;
``[queues.transfer."site.mod:Class"]``).
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from dataq.checksum import DEFAULT_ALGORITHM
from dataq.config import QueueSettings, load_options
from dataq.errors import ConfigError

from .base import Action, ActionContext, own_algorithm

ENTRY_POINT_GROUP = "dataq.actions"
BUILTIN: Mapping[str, str] = {
    "echo": "dataq.actions.testing:EchoAction",
    "noop": "dataq.actions.testing:NoopAction",
    "fail": "dataq.actions.testing:FailAction",
    "sleep": "dataq.actions.testing:SleepAction",
    "mark": "dataq.actions.testing:MarkAction",
    "disk_store": "dataq.actions.disk_store:DiskStoreAction",
    "network_move": "dataq.actions.network_move:NetworkMoveAction",
    "archive_ingest": "dataq.actions.archive.ingest:ArchiveIngestAction",
}
"""dataq's own actions, by import path: a module is imported only when a queue names its action (so a pop daemon
without the spark extra runs every other action). The entry-point group is for a site's actions."""

_INLINE_TYPES: Mapping[Any, type] = {int: int, float: float, str: str}


@dataclasses.dataclass(frozen=True, slots=True)
class ActionSpec:
    """One parsed entry of a queue's ``actions`` list."""

    entry: str
    """The entry as written."""
    cls: type[Action[Any]]
    options_key: str
    """The name of the entry's options table under the queue."""
    argument: str | None


def load_actions(context: ActionContext, source: str | None = None) -> list[Action[Any]]:
    """Build the actions of ``context.queue``, in order, with their options checked; raises ConfigError naming
    ``source`` (the settings file) and the key."""
    queue = context.queue
    prefix = f"queues.{queue.name}"
    specs = [resolve(entry, prefix, source) for entry in queue.actions]
    used = {spec.options_key for spec in specs}
    for key in queue.action_options:
        if key not in used:
            raise _error(source, f"{prefix}.{key}: options for {key!r}, which names no action here")
    return [spec.cls(_options(spec, queue, prefix, source), context) for spec in specs]


def _options(spec: ActionSpec, queue: QueueSettings, prefix: str, source: str | None) -> Any:
    table = dict(queue.action_options.get(spec.options_key, {}))
    if spec.argument is not None:
        table.update(_inline(spec, table, prefix, source))
    options = load_options(spec.cls.Options, table, f"{prefix}.{spec.options_key}", source)
    own = own_algorithm(options)
    if own is not None and queue.checksum not in (own, DEFAULT_ALGORITHM):
        raise _error(source, f"{prefix}.{spec.options_key}: checksum algorithm {own!r} is not the queue's "
                             f"checksum {queue.checksum!r}; leave it out (the queue's is used)")
    return options


def options_of(queue: QueueSettings, cls: type[Action[Any]], source: str | None = None) -> Any:
    """The checked options of the queue's entry that names action ``cls`` (None if no entry does), without
    building the action: ``dataq archive`` reads the catalog's place from them."""
    prefix = f"queues.{queue.name}"
    for entry in queue.actions:
        spec = resolve(entry, prefix, source)
        if spec.cls is cls:
            return _options(spec, queue, prefix, source)
    return None


def resolve(entry: str, prefix: str = "queues", source: str | None = None) -> ActionSpec:
    """Find the class an ``actions`` entry names (without building it)."""
    name, _, argument = entry.partition(":")
    found = _by_name(name, prefix, source)
    if found is not None:
        return ActionSpec(entry, found, name, argument or None)
    if not argument:
        known = ", ".join(sorted(set(BUILTIN) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}))
        raise _error(source, f"{prefix}.actions: unknown action {entry!r}; the actions installed are: {known} "
                             "(or give a module:Class path)")
    class_name, _, argument = argument.partition(":")
    return ActionSpec(entry, _import(name, class_name, entry, prefix, source), f"{name}:{class_name}", argument or None)


def _by_name(name: str, prefix: str, source: str | None) -> type[Action[Any]] | None:
    path = BUILTIN.get(name)
    builtin = None
    if path is not None:
        module_name, _, class_name = path.partition(":")
        builtin = _import(module_name, class_name, name, prefix, source)
    # Only the entry point asked for is loaded: a broken plugin must not stop queues that do not use it.
    points = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not points:
        return builtin
    loaded = {_load_entry_point(ep, prefix, source) for ep in points}
    if builtin is not None:
        loaded.add(builtin)
    if len(loaded) > 1:
        targets = ", ".join(sorted(f"{cls.__module__}:{cls.__qualname__}" for cls in loaded))
        raise _error(source, f"{prefix}.actions: action name {name!r} is ambiguous; it names {targets}")
    return loaded.pop()


def _load_entry_point(ep: EntryPoint, prefix: str, source: str | None) -> type[Action[Any]]:
    try:
        target = ep.load()
    except Exception as exc:
        raise _error(source, f"{prefix}.actions: action {ep.name!r} ({ep.value}) cannot be loaded: {exc}") from exc
    return _checked(target, ep.value, prefix, source)


def _import(module_name: str, class_name: str, entry: str, prefix: str, source: str | None) -> type[Action[Any]]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _error(source, f"{prefix}.actions: unknown action {entry!r}: no action named {module_name!r} and "
                             f"no module to import ({exc})") from exc
    target = getattr(module, class_name, None)
    if target is None:
        raise _error(source, f"{prefix}.actions: module {module_name!r} has no {class_name!r} (from {entry!r})")
    return _checked(target, entry, prefix, source)


def _checked(target: object, where: str, prefix: str, source: str | None) -> type[Action[Any]]:
    if not (isinstance(target, type) and issubclass(target, Action)):
        raise _error(source, f"{prefix}.actions: {where} is not a subclass of dataq.actions.Action")
    if not dataclasses.is_dataclass(target.Options):
        raise _error(source, f"{prefix}.actions: the Options of {where} is not a dataclass")
    return target


def _inline(spec: ActionSpec, table: Mapping[str, Any], prefix: str, source: str | None) -> dict[str, Any]:
    """The option an inline argument sets, converted to the option's type."""
    option = spec.cls.inline_option
    key = f"{prefix}.actions"
    if option is None:
        raise _error(source, f"{key}: action {spec.cls.name or spec.options_key!r} takes no inline argument "
                             f"(in {spec.entry!r}); set its options in [{prefix}.{spec.options_key}]")
    if option in table:
        raise _error(source, f"{key}: {spec.entry!r} and {prefix}.{spec.options_key}.{option} both set {option!r}")
    hint = typing.get_type_hints(spec.cls.Options).get(option)
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    convert = _INLINE_TYPES.get(args[0] if len(args) == 1 else hint)
    if convert is None:
        raise _error(source, f"{key}: the inline option {option!r} of {spec.entry!r} has no simple type")
    assert spec.argument is not None
    try:
        return {option: convert(spec.argument)}
    except ValueError as exc:
        raise _error(source, f"{key}: in {spec.entry!r}, {spec.argument!r} is not a valid {option} "
                             f"({convert.__name__} expected)") from exc


def _error(source: str | None, message: str) -> ConfigError:
    return ConfigError(f"{source or 'settings'}: {message}")
