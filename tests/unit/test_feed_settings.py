"""The [feed] settings: watched directories join the suite (dataq run, the systemd generator), each mistake is
named, and every key is documented in config/dataq.toml."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from dataq.config import load_settings
from dataq.config.feed_settings import FeedSettings
from dataq.embedded.suite import plan_children
from dataq.embedded.units import suite_units
from dataq.feed.spooled import spool_dir_for
from dataq.runtime.systemd import path_instance
from tests.unit.test_mail_metrics_settings import error_of, load

CONFIG = Path(__file__).resolve().parents[2] / "config" / "dataq.toml"


def test_by_default_nothing_is_watched_and_the_example_file_documents_every_key() -> None:
    assert load_settings(CONFIG, environ={}).feed == FeedSettings()
    text = CONFIG.read_text()
    for key in (field.name for field in dataclasses.fields(FeedSettings)):
        assert re.search(rf"^#? ?{key} = ", text, re.MULTILINE), f"config/dataq.toml lacks feed.{key}"


def test_each_watched_directory_is_a_feeder_of_dataq_run_and_a_unit_of_the_generator(tmp_path: Path) -> None:
    settings = load(tmp_path, '[feed]\ndirectories = ["/data/incoming", "/data/raw-2/"]\n')
    assert settings.feed.directories == ("/data/incoming", "/data/raw-2")
    feeders = [child for child in plan_children(settings) if child.name.startswith("feed:")]
    assert [child.name for child in feeders] == ["feed:/data/incoming", "feed:/data/raw-2"]
    assert feeders[0].argv[3:5] == ["feed", "--watch"] and feeders[0].argv[5] == "/data/incoming"
    units = suite_units(settings)
    assert "dataq-feed@data-incoming.service" in units and "dataq-feed@data-raw\\x2d2.service" in units


def test_each_feeder_has_its_own_spool_named_after_its_directory(tmp_path: Path) -> None:
    settings = load(tmp_path, '[feed]\nspool = "/var/spool/dataq"\n')
    assert spool_dir_for(settings.feed, "/data/incoming", "/var/lib/dataq") == "/var/spool/dataq/data-incoming"
    assert spool_dir_for(FeedSettings(), "/data/incoming/", "/var/lib/dataq") == "/var/lib/dataq/feed/data-incoming"
    assert path_instance("/") == "-"


def test_targets_and_options_are_taken(tmp_path: Path) -> None:
    settings = load(tmp_path, '[feed]\ntargets = ["10.0.0.5:9988", "[::1]:9989"]\npoll = 30\nrecursive = true\n'
                              'include = ["*.fits"]\nqueue = "transfer"\n')
    feed = settings.feed
    assert (feed.targets, feed.poll, feed.recursive, feed.include, feed.queue) == (
        ("10.0.0.5:9988", "[::1]:9989"), 30.0, True, ("*.fits",), "transfer")


def test_each_configured_feeder_has_a_metrics_port_of_its_own_in_the_order_of_the_directories(
    tmp_path: Path,
) -> None:
    feed = load(tmp_path, '[feed]\ndirectories = ["/data/a", "/data/b/"]\nmetrics_port = 9300\n').feed
    # A directory watched by hand takes the port after the listed ones', never a listed feeder's.
    assert [feed.metrics_port_for(d) for d in ("/data/a", "/data/b", "/data/b/", "/elsewhere")] == [
        9300, 9301, 9301, 9302]
    assert FeedSettings().metrics_port_for("/data/a") == 9110
    assert load(tmp_path, "[feed]\nmetrics_port = 0\n").feed.metrics_port_for("/data/a") == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[feed]\ndirectories = ["data/incoming"]', "key 'feed.directories' must be an absolute path"),
        ('[feed]\ndirectories = ["/a", "/a/"]', "key 'feed.directories' names a directory twice"),
        ('[feed]\ntargets = ["host"]', "key 'feed.targets': 'host' has no port"),
        ('[feed]\ntargets = ["host:99999"]', "key 'feed.targets': 'host:99999' has no valid port"),
        ('[feed]\nqueue = "nope"', "key 'feed.queue' names queue 'nope', which is not configured"),
        ('[feed]\nspool = "relative"', "key 'feed.spool' must be an absolute path"),
        ("[feed]\npoll = 0", "key 'feed.poll' must be"),
        ("[feed]\nwindow = 0", "key 'feed.window' must be"),
        ('[feed]\ntls_cert = "/c.pem"', "keys 'feed.tls_cert' and 'feed.tls_key' must be given together"),
        ("[feed]\nwatch = 1", "unknown key 'feed.watch'"),
        ('[feed]\ndirectories = ["/a", "/b"]\nmetrics_port = 65534',
         "key 'feed.metrics_port' (65534) leaves no port up to 65535 for each of the 2 directories' feeders and one "
         "watched by hand"),
        ("[feed]\nmetrics_port = 70000", "key 'feed.metrics_port' must be"),
    ],
)
def test_each_mistake_is_an_error_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_of(tmp_path, text + "\n")
