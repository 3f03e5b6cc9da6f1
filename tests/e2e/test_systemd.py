"""``systemctl start dataq``, for real: the units ``make install-systemd`` stages, under systemd booted in a
container (:mod:`tests.systemd_support`), with two queues in ``/etc/dataq/dataq.toml`` and nothing enabled by
hand. One of the queues is named ``raw-data``: its units' instance name is escaped (``raw\\x2ddata``); its action
takes 50 ms, so that records are in flight when the suite restarts. The tests share one container and run in
order, each from a running suite."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.systemd_support import DATAQ, DATAQ_CLI, SystemdContainer, booted

# The first test also builds the virtualenv (pip, from the network on a cold cache) and boots the container.
pytestmark = pytest.mark.timeout(600)

SETTINGS = """\
data_dir = "/var/lib/dataq"

[log]
format = "json"

[queues.transfer]
actions = ["echo"]

[queues.raw-data]
actions = ["sleep:0.05"]
push_port = 9989
"""
THIRD_QUEUE = """
[queues.third]
actions = ["echo"]
push_port = 9990
"""
REDIS = "dataq-redis.service"
SUITE = {"dataq.service", "dataq.target", REDIS, "dataq-web.service",
         "dataq-push@transfer.service", "dataq-pop@transfer.service",
         "dataq-push@raw\\x2ddata.service", "dataq-pop@raw\\x2ddata.service"}
PUSH = "dataq-push@transfer.service"
POP = "dataq-pop@transfer.service"
INJECTED_BUG = """\
# A bug in the push daemon, for the test: once, the first time the daemon runs after /var/lib/dataq/inject-bug
# was written, a part of it fails a second after it starts: its reaper loop (supervised), or a task it started
# and forgot (the file says "unsupervised").
import os

MARK = "/var/lib/dataq/inject-bug"
with open("/proc/self/cmdline", "rb") as cmdline:
    daemon = b"push" in cmdline.read().split(b"\\0")  # the unit's ExecCondition= runs Python too
if daemon and os.path.exists(MARK):
    with open(MARK) as mark:
        kind = mark.read().strip()
    os.unlink(MARK)
    import asyncio

    from dataq.runtime import supervise

    start = supervise.Supervisor.start

    async def fail_soon():
        await asyncio.sleep(1)
        raise RuntimeError(f"injected bug ({kind})")

    def start_with_a_bug(self, name, body, **kw):
        if name == "push-reaper":
            if kind == "supervised":
                body = fail_soon
            else:
                asyncio.get_running_loop().create_task(fail_soon())
        return start(self, name, body, **kw)

    supervise.Supervisor.start = start_with_a_bug
"""


def records(queue: str, count: int, start: int = 0) -> list[str]:
    return [f"/data/{queue}/f{i}.fits {hashlib.md5(f'{queue}{i}'.encode()).hexdigest()} {1000 + i}"
            for i in range(start, start + count)]


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory, dataq_venv: Path) -> Iterator[SystemdContainer]:
    yield from booted(tmp_path_factory.mktemp("systemd"), dataq_venv, SETTINGS)


def suite_up(container: SystemdContainer) -> None:
    container.systemctl("start", "dataq")
    container.wait_for("every unit of the suite to be active", lambda: container.active_units() >= SUITE)


def main_pid(container: SystemdContainer, unit: str) -> int:
    return int(container.show(unit, "MainPID")["MainPID"])


def restarted(container: SystemdContainer, unit: str, old_pid: int) -> bool:
    state = container.show(unit, "MainPID", "ActiveState", "SubState")
    return state["ActiveState"] == "active" and state["SubState"] == "running" and int(state["MainPID"]) not in (
        0, old_pid)


def test_start_dataq_brings_up_redis_and_both_daemons_of_every_configured_queue(
    container: SystemdContainer,
) -> None:
    assert container.busy_units() == set()  # nothing enabled: nothing runs before the operator asks
    suite_up(container)
    assert container.active_units() == SUITE

    for queue in ("transfer", "raw-data"):
        assert container.feed(queue, records(queue, 3)).startswith("pushed 3, ignored 0, errors 0")
        container.wait_for(f"{queue}'s records to be done",
                           lambda q=queue: container.summary(q)["counters"].get("done") == 3)
    # dataq-cli with no --config found /etc/dataq/dataq.toml, and so the embedded Redis in /var/lib/dataq.
    summary = container.summary("transfer")
    assert summary["active"] == 0 and summary["alive_workers"] == 2  # its push and pop daemons
    assert container.run(DATAQ_CLI, "--queue", "raw-data", "--summary").stdout.startswith("Queue raw-data\n")


def test_a_queue_added_to_the_settings_runs_after_a_daemon_reload_and_start(container: SystemdContainer) -> None:
    suite_up(container)
    original = container.settings_file.read_text()
    third = {"dataq-push@third.service", "dataq-pop@third.service"}
    try:
        container.settings_file.write_text(original + THIRD_QUEUE)
        status = container.run(DATAQ, "units", "--config", "/etc/dataq/dataq.toml")
        assert "systemctl daemon-reload" in status.stderr  # the settings changed under systemd's feet
        container.systemctl("daemon-reload")
        container.systemctl("start", "dataq")  # dataq is active already: this starts what it lacks
        container.wait_for("the new queue's daemons", lambda: third <= container.active_units())
        assert container.feed("third", records("third", 1)).startswith("pushed 1, ignored 0, errors 0")
    finally:
        container.settings_file.write_text(original)
        container.systemctl("daemon-reload")
    container.systemctl("restart", "dataq")
    container.wait_for("the suite without the removed queue", lambda: container.active_units() == SUITE)
    # Restarted with the rest (PartOf=), the removed queue's daemons were skipped, not started to fail.
    assert {container.show(unit, "ActiveState")["ActiveState"] for unit in third} == {"inactive"}
    assert container.failed_units() == set()


def test_a_watched_directory_in_the_settings_gets_a_feeder_that_feeds_its_files_after_a_reload(
    container: SystemdContainer,
) -> None:
    suite_up(container)
    original = container.settings_file.read_text()
    feeder = "dataq-feed@srv-incoming.service"
    container.run("install", "-d", "-m", "0755", "/srv/incoming")
    try:
        container.settings_file.write_text(original + '\n[feed]\ndirectories = ["/srv/incoming"]\n'
                                           'queue = "transfer"\n')
        container.systemctl("daemon-reload")
        container.systemctl("start", "dataq")
        container.wait_for("the feeder", lambda: feeder in container.active_units())
        done = container.summary("transfer")["counters"].get("done", 0)
        container.run("sh", "-c", "echo 'a night of data' > /srv/incoming/a.fits")
        container.wait_for("the watched file's record to be done",
                           lambda: container.summary("transfer")["counters"].get("done") == done + 1)
        status = container.run(DATAQ, "feed", "--watch", "/srv/incoming", "--status").stdout
        assert "spool /var/lib/dataq/feed/srv-incoming" in status and "pending: 0" in status
        assert "answered: 1" in status
        # A watched directory is audited every morning: the generator scheduled the audit's timer.
        assert "dataq-audit.timer" in container.active_units()
        assert "05:30" in container.show("dataq-audit.timer", "TimersCalendar")["TimersCalendar"]
        container.systemctl("start", "dataq-audit")  # runs it now: the file fed has arrived (exit 0)
        assert container.show("dataq-audit.service", "Result")["Result"] == "success"
    finally:
        container.settings_file.write_text(original)
        container.systemctl("daemon-reload")
    container.systemctl("restart", "dataq")
    container.wait_for("the suite without the feeder", lambda: container.active_units() == SUITE)
    assert container.show(feeder, "ActiveState")["ActiveState"] == "inactive"
    assert container.failed_units() == set()


def test_invalid_settings_fail_start_dataq_with_the_reason(container: SystemdContainer) -> None:
    original = container.settings_file.read_text()
    try:
        container.settings_file.write_text(original + "\n[push]\nprot = 9000\n")
        container.systemctl("daemon-reload")
        result = container.systemctl("restart", "dataq", check=False)
        assert result.returncode != 0
        journal = container.run("journalctl", "--no-pager", "-u", "dataq.service", "-n", "20").stdout
        assert "unknown key 'push.prot'" in journal, journal
        # The daemons and Redis, restarted with it, are skipped (ExecCondition=): no crash loop, no crash mail.
        container.wait_for("every daemon to be skipped", lambda: container.busy_units() <= {"dataq.target"})
        assert container.failed_units() == {"dataq.service"}
    finally:
        container.settings_file.write_text(original)
        container.systemctl("daemon-reload")
        container.systemctl("reset-failed")
    suite_up(container)


def test_a_killed_daemon_is_restarted(container: SystemdContainer) -> None:
    suite_up(container)
    pid = main_pid(container, PUSH)
    container.run("kill", "-KILL", str(pid))
    container.wait_for("systemd to restart the killed push daemon", lambda: restarted(container, PUSH, pid))
    assert container.feed("transfer", records("transfer", 1, start=100)).startswith("pushed 1, ignored 0, errors 0")


def test_a_frozen_daemon_is_restarted_by_the_watchdog(container: SystemdContainer) -> None:
    suite_up(container)
    drop_in = "/run/systemd/system/dataq-pop@.service.d"
    container.run("mkdir", "-p", drop_in)
    container.run("sh", "-c", f"printf '[Service]\\nWatchdogSec=4\\n' > {drop_in}/watchdog.conf")
    try:
        container.systemctl("daemon-reload")
        container.systemctl("restart", POP)
        container.wait_for("the pop daemon to be ready", lambda: restarted(container, POP, 0))
        pid = main_pid(container, POP)
        cursor = container.journal_cursor()
        container.run("kill", "-STOP", str(pid))
        container.wait_for("the watchdog to restart the frozen pop daemon", lambda: restarted(container, POP, pid),
                           timeout=30)
        assert "Watchdog timeout" in container.journal(POP, after=cursor)
    finally:
        container.run("rm", "-rf", drop_in)
        container.systemctl("daemon-reload")
        container.systemctl("restart", POP)


@pytest.mark.parametrize("part", ["supervised", "unsupervised"])
def test_a_part_of_a_daemon_that_fails_of_a_bug_makes_it_exit_and_systemd_restarts_it(
    container: SystemdContainer, part: str,
) -> None:
    suite_up(container)
    hooks = container.settings_file.parent / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(INJECTED_BUG)
    drop_in = "/run/systemd/system/dataq-push@.service.d"
    container.run("mkdir", "-p", drop_in)
    container.run("sh", "-c", f"printf '[Service]\\nEnvironment=PYTHONPATH=/etc/dataq/hooks\\n' > {drop_in}/hook.conf")
    try:
        container.systemctl("daemon-reload")
        container.run("sh", "-c", f"echo {part} > /var/lib/dataq/inject-bug && chown dataq /var/lib/dataq/inject-bug")
        cursor = container.journal_cursor()
        container.systemctl("restart", PUSH)
        container.wait_for("the bug to fire", lambda: container.run(
            "test", "-e", "/var/lib/dataq/inject-bug", check=False).returncode != 0)
        pid = main_pid(container, PUSH)
        container.wait_for("systemd to restart the push daemon that exited", lambda: restarted(container, PUSH, pid))
        journal = container.journal(PUSH, after=cursor)
        assert f"injected bug ({part})" in journal and "status=1/FAILURE" in journal, journal
        report = container.feed("transfer", records("transfer", 1, start=200 if part == "supervised" else 201))
        assert report.startswith("pushed 1, ignored 0, errors 0")
    finally:
        container.run("rm", "-rf", drop_in)
        container.systemctl("daemon-reload")


def test_restart_dataq_with_records_queued_and_in_flight_loses_none(container: SystemdContainer) -> None:
    suite_up(container)
    for queue in ("transfer", "raw-data"):
        container.wait_for(f"{queue} to be drained", lambda q=queue: settled(container.summary(q)))
    done_before = {queue: container.summary(queue)["counters"].get("done", 0) for queue in ("transfer", "raw-data")}
    container.run(DATAQ_CLI, "--queue", "transfer", "--action", "off")
    assert container.feed("transfer", records("transfer", 500, start=1000)).startswith("pushed 500, ignored 0")
    assert container.feed("raw-data", records("raw-data", 300, start=1000)).startswith("pushed 300, ignored 0")
    container.wait_for("raw-data to be running", lambda: container.summary("raw-data")["counters"].get(
        "done", 0) > done_before["raw-data"])

    container.systemctl("restart", "dataq")  # raw-data's pop daemon drains what it runs; the rest stays queued
    container.wait_for("the suite to be back", lambda: container.active_units() >= SUITE)
    assert container.summary("transfer")["active"] == 500  # kept in the AOF under /var/lib/dataq
    assert container.run("ls", "/var/lib/dataq/appendonlydir").stdout.strip()

    container.run(DATAQ_CLI, "--queue", "transfer", "--action", "on")
    for queue, count in (("transfer", 500), ("raw-data", 300)):
        container.wait_for(f"every record of {queue} to be done", lambda q=queue, n=count: container.summary(q)[
            "counters"].get("done", 0) == done_before[q] + n)
        assert settled(container.summary(queue)) and container.summary(queue)["inactive"] == 0


def settled(summary: dict[str, int]) -> bool:
    return summary["active"] == 0 and summary["in_flight"] == 0 and summary["delayed"] == 0


def test_stop_dataq_leaves_no_dataq_unit_active_and_no_dataq_process(container: SystemdContainer) -> None:
    suite_up(container)
    container.systemctl("stop", "dataq")  # returns once everything has stopped: dataq.service stops last
    assert container.busy_units() == set()
    assert container.processes("dataq") == [] and container.processes("redis-server") == []
    unavailable = container.run(DATAQ_CLI, "--summary", check=False)
    assert unavailable.returncode == 4
    assert unavailable.stderr.startswith("Error: Redis is unavailable at unix:///var/lib/dataq/redis.sock (from "
                                         "the settings file /etc/dataq/dataq.toml): ")
    assert unavailable.stderr.rstrip().endswith("; is `systemctl start dataq` done?")


def test_systemd_analyze_security_rates_every_unit_ok_or_better(container: SystemdContainer) -> None:
    suite_up(container)
    units = sorted(SUITE - {"dataq.target"})
    out = container.run("systemd-analyze", "security", "--no-pager", *units, check=False).stdout
    levels = dict(re.findall(r"^(\S+)\s+(\d+\.\d+) (?:SAFE|OK)\b", out, re.MULTILINE))
    assert set(levels) == set(units), out
