"""Which files a watched directory feeds: globs, defaults, hidden directories."""

from __future__ import annotations

import pytest

from dataq.feed.watch import WatchOptions


def test_hidden_and_temporary_names_are_skipped_by_default() -> None:
    options = WatchOptions("/in")
    assert options.wanted("/in/a.fits")
    for name in (".a.fits", "a.tmp", "a.part", "a.fits~", ".a.fits.Xq12ab"):
        assert not options.wanted(f"/in/{name}"), name


def test_include_globs_choose_names_and_may_take_what_the_defaults_skip() -> None:
    options = WatchOptions("/in", include=("*.fits", "*.part"))
    assert options.wanted("/in/a.fits") and options.wanted("/in/sub/b.fits") and options.wanted("/in/c.part")
    assert not options.wanted("/in/a.txt")


def test_exclude_globs_win_and_a_glob_with_a_slash_matches_the_path_beneath_the_root() -> None:
    options = WatchOptions("/in", include=("*.fits",), exclude=("calib/*",))
    assert options.wanted("/in/science/a.fits")
    assert not options.wanted("/in/calib/a.fits")


def test_hidden_directories_are_not_entered_and_nothing_is_entered_without_recursive() -> None:
    assert WatchOptions("/in", recursive=True).enters("/in/night1")
    assert not WatchOptions("/in", recursive=True).enters("/in/.snapshot")
    assert not WatchOptions("/in").enters("/in/night1")


def test_poll_and_settle_must_be_sensible() -> None:
    with pytest.raises(ValueError, match="poll must be a positive number"):
        WatchOptions("/in", poll=0)
    with pytest.raises(ValueError, match="settle must be zero or more"):
        WatchOptions("/in", settle=-1)
