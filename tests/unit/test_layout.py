"""The house by role: imports run one way, from the command line down to the base modules, and never in a circle.

Each package of dataq has a tier; a module may import from its own tier and the tiers below, never above, so a
reader can learn the code bottom up and a change low down cannot depend on what is built on it. Function-level
imports count too (a lazy import is still a dependency); only ``if TYPE_CHECKING:`` blocks are left out of the
cycle check, since they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"dataq": ROOT / "dataq", "dataq.cli": ROOT / "cli", "dataq.actions": ROOT / "actions"}
TIERS: dict[str, int] = {
    # the base: records, keys, errors, the wire protocol, logging, checksums, settings
    "dataq": 0, "dataq.config": 0,
    "dataq.activities": 0,  # what runs first: a queue's activities, their order and globs (the store serves them)
    "dataq.runtime": 1,   # backoff, signals, supervision, systemd: nothing about queues
    "dataq.store": 2,     # the only code that speaks Redis
    "dataq.embedded": 3, "dataq.ops": 3, "dataq.feed": 3,
    "dataq.custody": 3,   # the custody feature but its Redis access: keeper, receipts, desk, journeys, reports
    "dataq.audit": 3,     # the audit feature but its Redis access: manifests, copies, brakes, repair
    "dataq.nextsite": 3,  # kept, pipelined links to the next sites: hand-ons and receipts queries
    "dataq.actions": 4,   # what runs on records (network_move hands records on with the feed client)
    "dataq.push": 5, "dataq.pop": 5, "dataq.web": 5,
    "dataq.cli": 6,       # thin: parse, build settings, call the library, print
}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if package == "dataq" and parts and parts[0] in ("cli", "actions"):
                continue
            found[name] = path
    return found


def tier_of(module: str) -> int:
    package = max((p for p in TIERS if module == p or module.startswith(p + ".")), key=len)
    if package == "dataq" and module.count(".") >= 1 and module.split(".")[1] in ("cli", "actions"):
        raise AssertionError(module)
    return TIERS[package]


def imports(module: str, path: Path, *, runtime_only: bool) -> Iterator[tuple[str, int]]:
    """(imported dataq module, line) of every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    skipped: set[int] = set()
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped |= {id(inner) for inner in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base]) if base else ".".join(package)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target == "dataq" or target.startswith("dataq."):
                yield target, node.lineno


def resolved(target: str, known: dict[str, Path]) -> str | None:
    """The module an import names (``from pkg import mod`` names a module, ``from mod import name`` does not)."""
    return target if target in known else None


def test_every_module_has_a_tier() -> None:
    for module in modules():
        tier_of(module)


def test_no_module_imports_from_a_higher_tier() -> None:
    known = modules()
    upward = [
        f"{path.relative_to(ROOT)}:{line} ({module}, tier {tier_of(module)}) imports {target} "
        f"(tier {tier_of(target)})"
        for module, path in known.items()
        for target, line in imports(module, path, runtime_only=False)
        if resolved(target, known) and tier_of(target) > tier_of(module)
    ]
    assert upward == []


def test_modules_import_each_other_in_no_circle() -> None:
    known = modules()
    graph = {module: {t for t, _ in imports(module, path, runtime_only=True) if resolved(t, known) and t != module}
             for module, path in known.items()}
    # A package's __init__ importing its own modules is how a package presents itself, not a circle.
    for module, targets in graph.items():
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycle = " -> ".join([*stack[stack.index(target):], target])
                pytest.fail(f"import cycle: {cycle}")
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_only_the_store_speaks_redis() -> None:
    speaking = sorted(
        module for module, path in modules().items()
        if not module.startswith("dataq.store")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(name == "redis" or name.startswith("redis.")
                for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]))
    )
    assert speaking == []


def test_modules_stay_under_about_400_lines() -> None:
    long = {module: n for module, path in modules().items() if (n := len(path.read_text().splitlines())) > 420}
    assert long == {}


def top_level_imports(folder: Path) -> set[tuple[str, str]]:
    """(file, first part of the imported name) of every import in the Python files below ``folder``."""
    found = set()
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found |= {(str(path.relative_to(ROOT)), name.split(".")[0]) for name in names}
    return found


def test_the_tests_and_the_benchmarks_share_the_testbed_and_never_import_each_other() -> None:
    crossing = sorted(
        f"{file} imports {name}"
        for folder, forbidden in (("tests", {"bench"}), ("bench", {"tests"}), ("testbed", {"tests", "bench"}))
        for file, name in top_level_imports(ROOT / folder)
        if name in forbidden
    )
    assert crossing == []


def test_no_module_waits_through_asyncio_wait_for() -> None:
    """Python 3.11's ``asyncio.wait_for`` returns the result, and drops the cancel, when a cancel lands as what it
    waits for ends (gh-86296): a task stopped that way runs on. dataq waits with ``asyncio.timeout`` instead, and
    cancels what calls redis-py (which still uses it) with ``cancel_and_wait``."""
    waiting = sorted(
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in modules().values()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "wait_for" and ast.unparse(node.value) == "asyncio"
    )
    assert waiting == []
