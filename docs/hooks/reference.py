"""MkDocs hook: the pages generated at build time, so that nothing generated is committed.

- ``reference/configuration.md``: the configuration reference, rendered by :mod:`dataq.config.reference` from the
  settings' dataclasses and the options of dataq's own actions (:data:`dataq.actions.registry.BUILTIN`);
- ``reference/benchmark-results.md``: ``bench/RESULTS.md``, the benchmarks' full log, as it is in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from dataq.actions.registry import BUILTIN, resolve
from dataq.config.reference import ActionDoc, render

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_PAGE = "reference/configuration.md"
RESULTS_PAGE = "reference/benchmark-results.md"
RESULTS = ROOT / "bench" / "RESULTS.md"
# Action classes point their readers at their module's docstring, which the reference does not show.
_SEE_MODULE = re.compile(r"\s*\(see the module docstring\)")


def builtin_actions() -> list[ActionDoc]:
    """dataq's own actions, with the first paragraph of each class's docstring as its summary."""
    found = []
    for name in BUILTIN:
        cls: Any = resolve(name).cls
        summary = _SEE_MODULE.sub("", (cls.__doc__ or "").strip().split("\n\n")[0])
        found.append(ActionDoc(name, cls.Options, summary, cls.inline_option))
    return found


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, REFERENCE_PAGE, content=render(actions=builtin_actions())))
    files.append(File.generated(config, RESULTS_PAGE, content=RESULTS.read_text(encoding="utf-8")))
    return files


if __name__ == "__main__":
    print(render(actions=builtin_actions()))
