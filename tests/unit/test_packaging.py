"""The distribution ships every module: a non-editable install must not lose a subpackage."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"dataq.cli": ROOT / "cli", "dataq.actions": ROOT / "actions"}


def declared_packages() -> set[str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return {name.strip() for name in parser["options"]["packages"].split(",") if name.strip()}


def package_dirs() -> set[str]:
    found = {"dataq"}
    for init in (ROOT / "dataq").rglob("__init__.py"):
        found.add(".".join(("dataq", *init.parent.relative_to(ROOT / "dataq").parts)).rstrip("."))
    for name, folder in MAPPED.items():
        for init in folder.rglob("__init__.py"):
            found.add(".".join((name, *init.parent.relative_to(folder).parts)).rstrip("."))
    return {name for name in found if "__pycache__" not in name}


def test_every_package_directory_is_declared_in_setup_cfg() -> None:
    assert package_dirs() == declared_packages()


def test_lua_scripts_are_shipped_as_package_data() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    assert "lua/*.lua" in parser["options.package_data"]["dataq.store"]
