"""Settings files for the daemons that tests and benchmarks start: TOML written from Python values."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dataq.config.reference import toml_literal as toml_value


def write_tables(path: Path, data_dir: Path, tables: Mapping[str, Mapping[str, Any]], **top: Any) -> Path:
    """A settings file at ``path``: ``data_dir`` and the ``top`` keys, then each table with its keys."""
    lines = [f"data_dir = {toml_value(str(data_dir))}", *(f"{key} = {toml_value(value)}" for key, value in top.items())]
    for table, keys in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in keys.items()]
    path.write_text("\n".join(lines) + "\n")
    return path
