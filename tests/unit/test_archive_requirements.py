"""Without Java 17+ (or pyspark), archive_ingest says so in one line: at start-up, and from ``dataq archive``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")

from dataq.actions import load_actions
from dataq.actions.archive.ingest import check_java, check_requirements, find_java
from dataq.config import Settings
from dataq.errors import ConfigError
from testbed.actions import action_context
from tests.archive_support import options_for
from tests.pop_support import REPO_ROOT, load, write_config

UNUSED_REDIS = "redis://127.0.0.1:1"
"""Building an action and checking its options needs no Redis."""


def built(settings: Settings) -> list[object]:
    return list(load_actions(action_context(settings.queue()), settings.source))


def fake_java(directory: Path, version_line: str) -> Path:
    """A ``java`` that prints a version banner, as ``java -version`` does (on stderr)."""
    directory.mkdir(parents=True, exist_ok=True)
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


def test_no_java_home_and_no_java_on_path_is_a_config_error_that_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        check_java({"PATH": str(tmp_path)})
    message = str(caught.value)
    assert "needs Java 17 or later" in message
    assert "JAVA_HOME is unset and no 'java' is on PATH" in message
    assert "openjdk-17-jre-headless" in message


def test_java_home_without_a_java_binary_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"JAVA_HOME is '{tmp_path}' but {tmp_path}/bin/java is not an executable"):
        find_java({"JAVA_HOME": str(tmp_path), "PATH": "/usr/bin"})


def test_java_home_is_preferred_to_path_as_spark_class_does(tmp_path: Path) -> None:
    fake_java(tmp_path / "path", 'openjdk version "11.0.2" 2019-01-15')
    home_java = fake_java(tmp_path / "home" / "bin", 'openjdk version "21.0.1" 2023-10-17')
    assert find_java({"JAVA_HOME": str(tmp_path / "home"), "PATH": str(tmp_path / "path")}) == str(home_java)
    assert check_java({"JAVA_HOME": str(tmp_path / "home"), "PATH": str(tmp_path / "path")}) == 21


@pytest.mark.parametrize("banner", ['openjdk version "11.0.2" 2019-01-15', 'java version "1.8.0_381"'])
def test_java_older_than_17_is_refused_with_its_version(tmp_path: Path, banner: str) -> None:
    fake_java(tmp_path, banner)
    with pytest.raises(ConfigError, match=r"needs Java 17 or later; .*/java is Java (11|8)\."):
        check_java({"PATH": str(tmp_path)})


def test_a_java_that_does_not_tell_its_version_is_a_config_error(tmp_path: Path) -> None:
    fake_java(tmp_path, "hello")
    with pytest.raises(ConfigError, match="did not say which version it is"):
        check_java({"PATH": str(tmp_path)})


async def test_the_action_refuses_to_start_without_java(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load(write_config(tmp_path, UNUSED_REDIS, actions=["archive_ingest"],
                                 options={"archive_ingest": options_for(tmp_path / "archive")}))
    (action,) = load_actions(action_context(settings.queue()), settings.source)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="needs Java 17 or later"):
        await action.start()
    await action.close()


def test_without_pyspark_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    with pytest.raises(ConfigError, match=re.escape("archive_ingest needs pyspark (not installed): "
                                                    "pip install 'dataq[spark]'")):
        check_requirements()


def test_dataq_archive_without_java_prints_one_line_and_exits_with_the_config_status(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", "from dataq.cli.archive import archive; archive()", "stats",
                           "--catalog", str(tmp_path / "catalog")], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 3
    assert done.stdout == ""
    assert done.stderr.startswith("Error: archive_ingest runs on Spark, which needs Java 17 or later")
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("options", "complaint"), [
    ({"archive_root": "archive"}, "archive_root must be an absolute path"),
    ({"catalog": "cat"}, "catalog must be an absolute path"),
    ({"conf": ["executor.memory=2g"]}, "conf entry 'executor.memory=2g' must read 'spark.some.key=value'"),
    ({"batch_size": 0}, "batch_size must be at least 1"),
    ({"batch_age": 0.0}, "batch_age must be a positive number of seconds"),
    ({"checksum_algorithm": "crc32"}, "unknown checksum algorithm 'crc32'"),
    ({"compact_files": -1}, "compact_files must be 0 or more and compact_target_mb at least 1, got -1 and 128"),
    ({"compact_target_mb": 0}, "compact_files must be 0 or more and compact_target_mb at least 1, got 64 and 0"),
    ({"compact_grace": -5.0}, "compact_grace must be 0 or more seconds, got -5.0"),
    ({"conf": ["spark.sql.session.timeZone=America/Phoenix"]},
     "conf entry 'spark.sql.session.timeZone=America/Phoenix': dataq sets spark.sql.session.timeZone itself"),
    ({"night_utc_offset": 15.0}, "night_utc_offset must be hours from UTC between -12 and 14, got 15.0"),
])
def test_invalid_options_are_config_errors_naming_the_option(tmp_path: Path,
                                                             options: dict[str, object], complaint: str) -> None:
    table = {**options_for(tmp_path / "archive"), **options}
    settings = load(write_config(tmp_path, UNUSED_REDIS, actions=["archive_ingest"], options={"archive_ingest": table}))
    with pytest.raises(ConfigError, match=r"queues\.transfer\.archive_ingest") as caught:
        built(settings)
    assert complaint in str(caught.value)


def test_a_missing_archive_root_is_a_config_error(tmp_path: Path) -> None:
    table = {key: value for key, value in options_for(tmp_path).items() if key != "archive_root"}
    settings = load(write_config(tmp_path, UNUSED_REDIS, actions=["archive_ingest"], options={"archive_ingest": table}))
    with pytest.raises(ConfigError, match=re.escape("missing key 'queues.transfer.archive_ingest.archive_root'")):
        built(settings)


def test_a_spark_job_that_lost_its_way_to_the_cluster_is_an_outage_of_spark_not_a_fault_of_the_records() -> None:
    from py4j.protocol import Py4JNetworkError

    from dataq.actions.archive.ingest import spark_failure
    from dataq.errors import Retryable

    lost = spark_failure(Py4JNetworkError("Answer from Java side is empty"), "spark spark://10.0.0.1:7077")
    refused = spark_failure(ConnectionRefusedError(111, "Connection refused"), "spark local[2]")
    bad = spark_failure(ValueError("cannot parse header"), "spark local[2]")
    assert isinstance(lost, Retryable) and lost.destination == "spark spark://10.0.0.1:7077"
    assert isinstance(refused, Retryable)
    assert not isinstance(bad, Retryable) and str(bad) == "Spark job failed: cannot parse header"
