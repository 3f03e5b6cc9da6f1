"""Which files make up the archive catalog while compaction swaps small files for a large one, at every point a
compaction can stop (the files here are empty stand-ins: only their names and sizes matter to the listing)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dataq.actions.archive.catalog_files import (
    WORK_DIR,
    CatalogDamaged,
    collect_garbage,
    data_files,
    garbage_due,
    new_work_dir,
    partition_dir,
    partition_files,
    partitions,
    pending_outputs,
    publish,
)

DAY = "2026-11-25"


def small_files(catalog: Path, count: int, day: str = DAY) -> list[str]:
    directory = Path(partition_dir(str(catalog), day))
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(count):
        path = directory / f"part-{n:05d}-{day}.snappy.parquet"
        path.write_bytes(b"x" * (100 + n))
        paths.append(str(path))
    return paths


def output_in_work_dir(catalog: Path) -> tuple[str, str]:
    token, work = new_work_dir(str(catalog))
    output = os.path.join(work, "part-00000.snappy.parquet")
    Path(output).write_bytes(b"compacted" * 100)
    return token, output


def names(files: frozenset[str] | list[str]) -> set[str]:
    return {os.path.basename(path) for path in files}


def test_appends_unfinished_output_and_metadata_are_not_data(tmp_path: Path) -> None:
    inputs = small_files(tmp_path, 3)
    directory = Path(partition_dir(str(tmp_path), DAY))
    (directory / "_SUCCESS").write_text("")
    (directory / ".part-9.parquet.crc").write_text("")
    (tmp_path / "_temporary" / "0").mkdir(parents=True)
    (tmp_path / "_temporary" / "0" / "part-7.parquet").write_text("")
    output_in_work_dir(tmp_path)
    assert data_files(str(tmp_path)) == frozenset(inputs)
    assert partitions(str(tmp_path)) == [DAY]
    assert [found.size for found in partition_files(str(tmp_path), DAY)] == [100, 101, 102]


def test_a_published_output_hides_the_files_it_replaces_until_they_are_removed_after_the_grace(
        tmp_path: Path) -> None:
    inputs = small_files(tmp_path, 4)
    token, output = output_in_work_dir(tmp_path)
    published = publish(partition_dir(str(tmp_path), DAY), token, output, inputs[:3])
    assert data_files(str(tmp_path)) == {published, inputs[3]}
    assert pending_outputs(partition_dir(str(tmp_path), DAY)) == {os.path.basename(published)}

    assert collect_garbage(str(tmp_path), grace=60) == 0  # within the grace: a reader may still open them
    assert all(os.path.exists(path) for path in inputs)
    assert data_files(str(tmp_path)) == {published, inputs[3]}

    assert collect_garbage(str(tmp_path), grace=60, now=time.time() + 61) == 3
    assert [os.path.exists(path) for path in inputs] == [False, False, False, True]
    assert data_files(str(tmp_path)) == {published, inputs[3]}
    assert pending_outputs(partition_dir(str(tmp_path), DAY)) == set()


def test_a_compaction_that_died_before_publishing_changes_nothing_and_is_cleaned_up(tmp_path: Path) -> None:
    inputs = small_files(tmp_path, 3)
    token, output = output_in_work_dir(tmp_path)
    directory = partition_dir(str(tmp_path), DAY)
    published = publish(directory, token, output, inputs)
    os.rename(published, output)  # as if it had died between the manifest and the output's rename
    assert data_files(str(tmp_path)) == frozenset(inputs)
    # Until a day has passed, its manifest and work directory could be a compaction still under way elsewhere.
    assert collect_garbage(str(tmp_path), grace=0) == 0
    assert len(os.listdir(directory)) == len(inputs) + 1 and len(os.listdir(tmp_path / WORK_DIR)) == 1
    assert collect_garbage(str(tmp_path), grace=0, now=time.time() + 2 * 86_400) == 0
    assert data_files(str(tmp_path)) == frozenset(inputs)
    assert set(os.listdir(directory)) == names(inputs)
    assert os.listdir(tmp_path / WORK_DIR) == []


def test_a_removal_that_died_half_way_still_hides_what_is_left_and_is_finished_next_time(tmp_path: Path) -> None:
    inputs = small_files(tmp_path, 3)
    token, output = output_in_work_dir(tmp_path)
    published = publish(partition_dir(str(tmp_path), DAY), token, output, inputs)
    os.unlink(inputs[0])  # the removal stopped after its first file
    assert data_files(str(tmp_path)) == {published}
    assert collect_garbage(str(tmp_path), grace=0) == 2
    assert data_files(str(tmp_path)) == {published}
    assert sorted(os.listdir(partition_dir(str(tmp_path), DAY))) == [os.path.basename(published)]


def test_every_partition_is_listed_and_collected(tmp_path: Path) -> None:
    first, second = small_files(tmp_path, 2, "2026-11-24"), small_files(tmp_path, 2, DAY)
    for day, inputs in (("2026-11-24", first), (DAY, second)):
        token, output = output_in_work_dir(tmp_path)
        publish(partition_dir(str(tmp_path), day), token, output, inputs)
    assert partitions(str(tmp_path)) == ["2026-11-24", DAY]
    assert len(data_files(str(tmp_path))) == 2
    assert collect_garbage(str(tmp_path), grace=0) == 4


def test_an_empty_or_missing_catalog_has_no_files(tmp_path: Path) -> None:
    assert data_files(str(tmp_path / "none")) == frozenset()
    assert partitions(str(tmp_path / "none")) == []
    assert partition_files(str(tmp_path), DAY) == []
    assert collect_garbage(str(tmp_path / "none"), grace=0) == 0


@pytest.mark.parametrize("target", [250, 10_000])
def test_a_compaction_takes_the_smallest_files_up_to_its_target_and_never_a_pending_output(
        tmp_path: Path, target: int) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
    from dataq.actions.archive import compaction

    inputs = small_files(tmp_path, 5)  # 100..104 bytes
    big = Path(partition_dir(str(tmp_path), DAY)) / "part-big.parquet"
    big.write_bytes(b"y" * 20_000)
    chosen = compaction.plan(compaction.small_files(str(tmp_path), DAY, target), target)
    assert [found.path for found in chosen] == (inputs[:2] if target == 250 else inputs)
    token, output = output_in_work_dir(tmp_path)
    publish(partition_dir(str(tmp_path), DAY), token, output, inputs[:2])
    pending = compaction.small_files(str(tmp_path), DAY, 10_000)
    assert [found.path for found in pending] == inputs[2:]  # not the output yet
    collect_garbage(str(tmp_path), grace=0)
    assert len(compaction.small_files(str(tmp_path), DAY, 10_000)) == 4  # manifest gone: a file like any other


@pytest.mark.parametrize("damage", ['{"replaced": ', '{"other": []}', '{"replaced": [1, 2]}'])
def test_a_damaged_manifest_stops_every_reader_with_what_to_do_rather_than_show_rows_twice(
        tmp_path: Path, damage: str) -> None:
    inputs = small_files(tmp_path, 2)
    token, output = output_in_work_dir(tmp_path)
    published = publish(partition_dir(str(tmp_path), DAY), token, output, inputs)
    (Path(partition_dir(str(tmp_path), DAY)) / f"_compact-{token}.json").write_text(damage)
    with pytest.raises(CatalogDamaged, match=f"manifest .*_compact-{token}.json"):
        data_files(str(tmp_path))
    os.unlink(published)  # what the message says to do while the listed files are there
    assert data_files(str(tmp_path)) == frozenset(inputs)


def test_a_listing_taken_while_replaced_files_are_removed_is_taken_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = small_files(tmp_path, 3)
    token, output = output_in_work_dir(tmp_path)
    directory = partition_dir(str(tmp_path), DAY)
    published = publish(directory, token, output, inputs)
    stale = os.listdir(directory)  # taken before the removal below, read after it
    for path in inputs:
        os.unlink(path)
    os.unlink(os.path.join(directory, f"_compact-{token}.json"))
    listings = []
    real_listdir = os.listdir

    def counted(path: str) -> list[str]:
        listings.append(path)
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", counted)
    monkeypatch.setattr(os, "walk", lambda top: iter([(str(tmp_path), [], []), (directory, [], stale)]))
    assert set(stale) >= names(inputs)
    assert data_files(str(tmp_path)) == {published}  # not the removed inputs the stale listing names
    assert listings == [directory]


def test_garbage_is_due_once_a_manifest_outlives_its_grace(tmp_path: Path) -> None:
    inputs = small_files(tmp_path, 2)
    token, output = output_in_work_dir(tmp_path)
    publish(partition_dir(str(tmp_path), DAY), token, output, inputs)
    assert not garbage_due(str(tmp_path), grace=60)
    assert garbage_due(str(tmp_path), grace=60, now=time.time() + 61)
    collect_garbage(str(tmp_path), grace=0)
    assert not garbage_due(str(tmp_path), grace=0)


def test_a_manifest_left_half_written_is_removed(tmp_path: Path) -> None:
    small_files(tmp_path, 1)
    leftover = Path(partition_dir(str(tmp_path), DAY)) / "_compact-x.json.1a2b.tmp"
    leftover.write_text('{"repl')
    collect_garbage(str(tmp_path), grace=0)
    assert not leftover.exists()


def test_an_output_replaced_by_a_later_one_waits_for_its_own_inputs_removal(tmp_path: Path) -> None:
    # Chains cannot be published (compaction checks under the lease); were one there, removal keeps it right.
    inputs = small_files(tmp_path, 2)
    directory = partition_dir(str(tmp_path), DAY)
    token, output = output_in_work_dir(tmp_path)
    first = publish(directory, token, output, inputs)
    token, output = output_in_work_dir(tmp_path)
    second = publish(directory, token, output, [first])
    assert data_files(str(tmp_path)) == {second}
    collect_garbage(str(tmp_path), grace=0)
    assert data_files(str(tmp_path)) == {second}
    assert not any(os.path.exists(path) for path in [*inputs, first])


def test_a_publication_whose_manifest_vanished_is_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = small_files(tmp_path, 2)
    directory = partition_dir(str(tmp_path), DAY)
    token, output = output_in_work_dir(tmp_path)
    real_replace = os.replace

    def then_lost(source: str, target: str) -> None:
        real_replace(source, target)
        if target.endswith(".parquet"):  # another compactor, the lease lost, removed the manifest just now
            os.unlink(os.path.join(directory, f"_compact-{token}.json"))

    monkeypatch.setattr(os, "replace", then_lost)
    with pytest.raises(CatalogDamaged, match="vanished while its compaction was published"):
        publish(directory, token, output, inputs)
    assert data_files(str(tmp_path)) == frozenset(inputs)


def test_a_compaction_is_due_on_the_count_of_small_files_not_on_what_one_merge_takes(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'dataq[spark]')")
    from dataq.actions.archive.compaction import due

    inputs = small_files(tmp_path, 5)  # 100..104 bytes
    assert [found.path for found in due(str(tmp_path), DAY, 250, min_files=4)] == inputs[:2]
    assert due(str(tmp_path), DAY, 250, min_files=6) == []  # too few small files yet
    assert due(str(tmp_path), DAY, 150, min_files=2) == []  # no two fit the target together: nothing to gain
