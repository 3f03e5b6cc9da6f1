"""Real systemd for the units' tests: this machine booted again in a container, with dataq's units installed.

``systemd-nspawn --volatile=yes --directory=/ --boot`` boots the host's own /usr under an empty /etc and /var
(tmpfs), with only a loopback network. Bound into it: the units, the generator and the sysusers file that
``make install-systemd`` stages (its ``DESTDIR``), the settings as ``/etc/dataq``, a fixed machine-id (without
one, the first boot enables every unit by its preset, which a real host does not), and a virtualenv at
``/opt/dataq`` made with Debian's ``/usr/bin/python3`` (the units hide /root and /home, where this image's own
Python lives) with this checkout installed. Everything is driven as an operator would, with ``nsenter`` into the
container: ``systemctl``, ``dataq-cli``, ``dataq feed``.

Hand-written rather than a library: no Python package drives nspawn, and these are a handful of commands.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_IN_CONTAINER = "/opt/dataq"
DATAQ = f"{VENV_IN_CONTAINER}/bin/dataq"
DATAQ_CLI = f"{VENV_IN_CONTAINER}/bin/dataq-cli"
BOOT_TIMEOUT = 60.0
COMMAND_TIMEOUT = 120.0
POWEROFF_TIMEOUT = 60.0
POLL_FIRST = 0.2
POLL_MAX = 1.5
"""Seconds between two looks at a container (:meth:`SystemdContainer.wait_for`): first, and at most."""
BOOTS = itertools.count(1)
OPERATOR_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                "LANG": "C.UTF-8"}
MACHINE_ID = "5eb3d1a2c4f64b4c9a0f1d2e3c4b5a69\n"
NSPAWN = ("systemd-nspawn", "--quiet", "--volatile=yes", "--directory=/", "--private-network", "--register=no",
          "--keep-unit")
"""Without ``--keep-unit`` nspawn asks the host's systemd, over D-Bus, for a scope: there is none here."""


def nspawn_missing() -> str | None:
    """Why a container cannot be booted here (None: it can)."""
    if os.geteuid() != 0:
        return "booting a container needs root"
    for tool in ("systemd-nspawn", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (make install-test installs systemd-container)"
    if not Path("/usr/lib/systemd/systemd").exists():
        return "systemd is not installed"
    return None


def stage_install(stage: Path) -> None:
    """What ``make install-systemd`` installs, under ``stage``, for a dataq living in the container's /opt."""
    subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "install-systemd", f"DESTDIR={stage}",
                    f"DATAQ_BIN={DATAQ}"], check=True, capture_output=True, timeout=COMMAND_TIMEOUT)


def build_venv(work: Path) -> Path:
    """A virtualenv of this checkout for ``/opt/dataq``: returns the host directory to bind there.

    Made here with the container's own Python (the host's /usr, which the container shares: 3.11.2 needs packages
    that the tests' 3.11.7 does not), then moved: a virtualenv finds its packages from where its ``python`` is,
    and only its scripts' first lines name the directory it was made in."""
    venv = work / "opt-dataq"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    subprocess.run([str(venv / "bin/pip"), "install", "--quiet", "--disable-pip-version-check", str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    made_here = f"#!{venv}/bin/".encode()
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink() and (text := script.read_bytes()).startswith(made_here):
            script.write_bytes(text.replace(made_here, f"#!{VENV_IN_CONTAINER}/bin/".encode(), 1))
    return venv


class SystemdContainer:
    """This machine booted in a container, with dataq's units staged in ``stage`` and dataq in ``venv``."""

    def __init__(self, work: Path, stage: Path, venv: Path) -> None:
        self.work = work
        self.stage = stage
        self.venv = venv
        self.settings_file = stage / "etc/dataq/dataq.toml"
        self.console_log = work / "console.log"
        self._nspawn: subprocess.Popen[bytes] | None = None
        self.pid = 0
        """The container's systemd, as the host sees it (nsenter's target)."""

    def boot(self) -> None:
        machine_id = self.work / "machine-id"
        machine_id.write_text(MACHINE_ID)
        etc = self.stage / "etc"
        binds = [f"--bind={etc}/systemd/system:/etc/systemd/system",
                 f"--bind-ro={etc}/systemd/system-generators:/etc/systemd/system-generators",
                 f"--bind-ro={etc}/sysusers.d:/etc/sysusers.d", f"--bind={etc}/dataq:/etc/dataq",
                 f"--bind-ro={machine_id}:/etc/machine-id", f"--bind-ro={self.venv}:{VENV_IN_CONTAINER}"]
        with open(self.console_log, "ab") as console:
            self._nspawn = subprocess.Popen(
                [*NSPAWN, "--boot", "--console=read-only", f"--machine=dataq-test-{os.getpid()}-{next(BOOTS)}",
                 *binds],
                stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + BOOT_TIMEOUT
        while not self.pid:
            if self._nspawn.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the container did not boot; see {self.console_log}")
            self.pid = self._find_init()
            time.sleep(0.1)
        # Until systemd's own socket is up, systemctl cannot even ask.
        state = self.wait_for("the container's systemd to answer", self._system_state, timeout=BOOT_TIMEOUT)
        if state not in ("running", "degraded"):
            raise RuntimeError(f"the container's systemd is {state!r} after booting; see {self.console_log}")

    def _system_state(self) -> str:
        """``systemctl is-system-running`` once booting is over; "" while systemd cannot be asked yet."""
        return self.run("systemctl", "is-system-running", "--wait", check=False, timeout=BOOT_TIMEOUT).stdout.strip()

    def _find_init(self) -> int:
        assert self._nspawn is not None
        pending = [self._nspawn.pid]
        while pending:
            parent = pending.pop()
            try:
                children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                try:
                    if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                        return child
                except OSError:
                    continue
                pending.append(child)
        return 0

    def run(self, *argv: str, check: bool = True, timeout: float = COMMAND_TIMEOUT, input: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
        """``argv`` inside the container, as root, in all its namespaces, with a login shell's environment (not
        the tests', whose ``DATAQ_CONFIG`` would hide the system's settings)."""
        result = subprocess.run(["nsenter", "-t", str(self.pid), "-a", *argv], capture_output=True, text=True,
                                timeout=timeout, input=input, env=OPERATOR_ENV, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
        return result

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", "--no-pager", *args, check=check)

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        """``systemctl show`` of ``unit``'s ``properties``, as a dict."""
        out = self.systemctl("show", unit, *(f"--property={p}" for p in properties)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def active_units(self, pattern: str = "dataq*") -> set[str]:
        """The units matching ``pattern`` that are active (started, and ready if they report it)."""
        return {unit["unit"] for unit in self._units(pattern) if unit["active"] == "active"}

    def busy_units(self, pattern: str = "dataq*") -> set[str]:
        """The units matching ``pattern`` not at rest: active, activating, deactivating or reloading."""
        return {unit["unit"] for unit in self._units(pattern) if unit["active"] not in ("inactive", "failed")}

    def failed_units(self, pattern: str = "dataq*") -> set[str]:
        """The units matching ``pattern`` in the failed state."""
        return {unit["unit"] for unit in self._units(pattern) if unit["active"] == "failed"}

    def _units(self, pattern: str) -> list[dict[str, str]]:
        out = self.systemctl("list-units", "--all", "--plain", "--no-legend", "--output=json", pattern).stdout
        units: list[dict[str, str]] = json.loads(out)
        return units

    def wait_for(self, what: str, predicate: Any, timeout: float = 60.0) -> Any:
        """Poll ``predicate()`` until it returns something true; fail naming ``what`` after ``timeout`` s, with
        the state of every dataq unit then. A predicate may start a Python program in the container (dataq-cli):
        the polls come further apart as the wait goes on, not to keep a core busy."""
        deadline = time.monotonic() + timeout
        pause = POLL_FIRST
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                states = sorted(f"{unit['unit']}: {unit['active']}/{unit['sub']}" for unit in self._units("dataq*"))
                journal = self.run("journalctl", "--no-pager", "-n", "80", check=False).stdout
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; the units: {states}; "
                                     f"the journal's end:\n{journal}")
            time.sleep(pause)
            pause = min(POLL_MAX, pause * 1.5)

    def journal_cursor(self) -> str:
        """Where the journal ends now, for :meth:`journal` to read what comes after."""
        out = self.run("journalctl", "--no-pager", "--lines=0", "--show-cursor").stdout
        return out.rsplit("-- cursor: ", 1)[1].strip()

    def journal(self, unit: str, after: str) -> str:
        """What ``unit`` logged since the journal ended at cursor ``after``."""
        return self.run("journalctl", "--no-pager", "--unit", unit, f"--after-cursor={after}").stdout

    def processes(self, name: str) -> list[str]:
        """Command lines of the container's processes whose command line holds ``name``."""
        out = self.run("ps", "-eo", "args=", check=False).stdout
        return [line for line in out.splitlines() if name in line and "ps -eo" not in line]

    def summary(self, queue: str, *args: str) -> dict[str, Any]:
        """``dataq-cli --summary --json`` of ``queue``, with no ``--config``: the system's settings are found."""
        out = self.run(DATAQ_CLI, "--queue", queue, "--summary", "--json", *args).stdout
        document: dict[str, Any] = json.loads(out.splitlines()[0])
        assert document["switch"] == "summary", document
        return document

    def feed(self, queue: str, lines: Sequence[str]) -> str:
        """Send record lines to ``queue``'s push daemon over the container's loopback; the last line of
        ``dataq feed``'s output, its report (``pushed N, ignored N, errors N in ...``)."""
        out = self.run(DATAQ, "feed", "--queue", queue, "-", input="".join(f"{line}\n" for line in lines)).stdout
        return out.splitlines()[-1]

    def poweroff(self) -> None:
        """Shut the container down as a host would (systemd stops every unit), or kill it after a timeout."""
        if self._nspawn is None or self._nspawn.poll() is not None:
            return
        self._nspawn.send_signal(signal.SIGTERM)  # nspawn passes it to the container's systemd as "power off"
        try:
            self._nspawn.wait(POWEROFF_TIMEOUT)
        except subprocess.TimeoutExpired:
            if self.pid:
                os.kill(self.pid, signal.SIGKILL)  # the init of a PID namespace: every process in it dies with it
            self._nspawn.kill()
            self._nspawn.wait()


@pytest.fixture(scope="session")
def dataq_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The virtualenv for ``/opt/dataq``, built once per test session."""
    if (why := nspawn_missing()) is not None:
        pytest.skip(why)
    return build_venv(tmp_path_factory.mktemp("systemd-venv"))


def booted(work: Path, venv: Path, settings: str, enable: Sequence[str] = ()) -> Iterator[SystemdContainer]:
    """A container booted with ``settings`` as /etc/dataq/dataq.toml and ``enable`` enabled beforehand (as
    ``systemctl enable`` would leave them); powered off afterwards."""
    stage = work / "stage"
    stage_install(stage)
    container = SystemdContainer(work, stage, venv)
    container.settings_file.write_text(settings)
    container.settings_file.chmod(0o644)  # until the container's sysusers has made the group dataq (below)
    for unit in enable:
        wants = stage / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(exist_ok=True)
        (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
    try:
        container.boot()
        # As make install-systemd leaves it on a host: readable by root and the group dataq only.
        container.run("chgrp", "dataq", "/etc/dataq/dataq.toml")
        container.run("chmod", "0640", "/etc/dataq/dataq.toml")
        yield container
    finally:
        container.poweroff()
