"""An older dataq, built from this repository's own history, to run beside today's: the far side of a mixed-version
cascade (``tests/e2e/test_mixed_versions.py``).

:data:`OLDER_COMMIT` is dataq 0.1 before site names and receipts (and before the handshake): its push daemon takes
record lines in both forms and refuses any other key. It is taken with ``git archive``, installed (``pip install
--target``, its own ``setup.cfg``) into a folder, and run by a virtualenv of its own whose only other path is this
virtualenv's site-packages, for the libraries both versions use. Today's dataq is never on its path: that
virtualenv reads no ``.pth`` file of ours, so the editable install of today's code is not seen.

Built once per checkout (under ``build/``, which git ignores), under a file lock, so the test workers of one run
share it.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLDER_COMMIT = "299034dd47fa86cd4449a0dff9b959e1ae6cc894"
"""dataq 0.1, the commit before "Keep custody of handed-on records until end-to-end receipts"."""
BUILD_TIMEOUT = 300.0


class OlderBuildError(RuntimeError):
    """The older dataq could not be built (the commit missing from a shallow clone, pip failing): says which."""


def older_python(commit: str = OLDER_COMMIT, cache: Path = ROOT / "build") -> Path:
    """The interpreter of a virtualenv in which ``import dataq`` is dataq at ``commit``; built if missing."""
    home = cache / f"older-dataq-{commit[:12]}"
    python = home / "venv" / "bin" / "python"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".older-dataq-{commit[:12]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "ready").exists():
            shutil.rmtree(home, ignore_errors=True)
            _build(commit, home)
            (home / "ready").touch()
    return python


def _build(commit: str, home: Path) -> None:
    source, lib = home / "src", home / "lib"
    source.mkdir(parents=True)
    archive = _run(["git", "-C", str(ROOT), "archive", "--format=tar", commit], binary=True)
    _run(["tar", "-x", "-C", str(source)], stdin=archive)
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(lib), str(source)])
    _run([sys.executable, "-m", "venv", "--without-pip", str(home / "venv")])
    ours = sysconfig.get_paths()["purelib"]
    (site_packages,) = (home / "venv" / "lib").glob("python3*/site-packages")
    # The older dataq first, then our libraries (redis, click, structlog...): a plain path, whose own .pth files,
    # the editable install of today's dataq among them, are never read.
    (site_packages / "older-dataq.pth").write_text(f"{lib}\n{ours}\n")


def _run(command: list[str], *, stdin: bytes | None = None, binary: bool = False) -> bytes:
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, timeout=BUILD_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OlderBuildError(f"building the older dataq: {' '.join(command[:4])} failed: {exc}") from exc
    if done.returncode != 0:
        raise OlderBuildError(f"building the older dataq: {' '.join(command[:4])} exited {done.returncode}: "
                              f"{done.stderr.decode(errors='replace')[-2000:]}")
    return done.stdout if binary else b""


def version_of(python: Path) -> str:
    """``dataq.__version__`` as ``python`` imports it (and where from)."""
    code = "import dataq; print(dataq.__version__, dataq.__file__)"
    return subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip()
