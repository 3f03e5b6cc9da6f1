"""The documentation site builds with ``mkdocs build --strict`` (any warning fails it), offline, with the
configuration reference generated into it from the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"
BUILD_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module's tests."""
    # Not a skip: the test extra installs mkdocs, and CI must build the site.
    assert MKDOCS.exists(), f"{MKDOCS} is missing: `make install-test` installs mkdocs (the test extra)"
    directory = tmp_path_factory.mktemp("site")
    # Material prints a banner about MkDocs 2.0 on every build; it is no warning of ours.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(directory)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return directory


def test_the_site_builds_strictly_with_the_configuration_reference(site: Path) -> None:
    page = (site / "reference" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "<code>batch_max</code>" in page
    assert 'id="queues-name-network_move"' in page  # the actions' options are there too
    assert "Generated from the settings' code" in page


def test_the_site_holds_every_page_and_the_console_screenshot(site: Path) -> None:
    pages = {path.parent.relative_to(site).as_posix() for path in site.rglob("index.html")}
    assert {"getting-started", "concepts", "operating/cli", "operating/web-console", "operating/systemd",
            "operating/monitoring", "feeding", "ha", "archive", "actions", "custody", "performance",
            "reference/configuration", "reference/benchmark-results"} <= pages
    for view in ("overview", "states", "unreachable", "search", "journey", "record", "audit", "feeders"):
        assert (site / f"console-{view}.png").is_file(), view
    assert not (site / "hooks").exists()  # the build's own code is not published


def test_the_site_fetches_nothing_from_the_internet(site: Path) -> None:
    loaded = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//([^\"]+)\"")
    fetched = {
        f"{path.relative_to(site)}: {address}"
        for path in site.rglob("*.html")
        for address in loaded.findall(path.read_text(encoding="utf-8"))
    }
    assert fetched == set()
