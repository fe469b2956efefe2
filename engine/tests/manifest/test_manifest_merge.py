"""merge_entries and live_files follow FileEntry.mergeEntries and the commit's delete check."""

from __future__ import annotations

from dataclasses import replace

import pytest
from manifest_samples import entry, long_row

from strata.manifest import FileKind, ManifestMergeError, live_files, merge_entries

ADD, DELETE = FileKind.ADD, FileKind.DELETE


def _names(entries: list) -> list[tuple[str, str]]:
    return [(e.kind.name, e.file.file_name) for e in entries]


def test_add_then_delete_cancels() -> None:
    assert merge_entries([entry(ADD, "a"), entry(ADD, "b"), entry(DELETE, "a")]) == [entry(ADD, "b")]


def test_delete_of_unseen_file_is_kept_when_merging_deltas() -> None:
    merged = merge_entries([entry(DELETE, "old"), entry(ADD, "new")])
    assert _names(merged) == [("DELETE", "old"), ("ADD", "new")]


def test_re_add_after_delete_moves_to_the_end() -> None:
    merged = merge_entries([entry(ADD, "a"), entry(ADD, "b"), entry(DELETE, "a"), entry(ADD, "a")])
    assert _names(merged) == [("ADD", "b"), ("ADD", "a")]


def test_adding_a_present_file_is_an_error() -> None:
    with pytest.raises(ManifestMergeError, match=r"Trying to add file 'a'.*already present as ADD"):
        merge_entries([entry(ADD, "a"), entry(ADD, "a")])
    # Java refuses an ADD over a kept DELETE too: one add and one delete per file.
    with pytest.raises(ManifestMergeError, match="already present as DELETE"):
        merge_entries([entry(DELETE, "a"), entry(ADD, "a")])


@pytest.mark.parametrize("changed", [
    {"bucket": 1}, {"level": 1}, {"partition": long_row(3)},
])
def test_identifier_distinguishes_location(changed: dict) -> None:
    merged = merge_entries([entry(ADD, "a"), entry(DELETE, "a", **changed)])
    assert _names(merged) == [("ADD", "a"), ("DELETE", "a")]


@pytest.mark.parametrize("changed", [
    {"extra_files": ["a.index"]}, {"embedded_index": b"\x01"}, {"external_path": "s3://x/a"},
])
def test_identifier_includes_extra_files_index_and_external_path(changed: dict) -> None:
    other = entry(DELETE, "a")
    other.file = replace(other.file, **changed)
    assert len(merge_entries([entry(ADD, "a"), other])) == 2
    assert entry(ADD, "a").identifier() != other.identifier()


def test_identifier_ignores_stats_sizes_and_total_buckets() -> None:
    deleted = entry(DELETE, "a")
    deleted.total_buckets = 8
    deleted.file = replace(deleted.file, file_size=123, row_count=9, schema_id=4)
    assert merge_entries([entry(ADD, "a"), deleted]) == []


def test_live_files_returns_surviving_adds_in_order() -> None:
    history = [entry(ADD, "a"), entry(ADD, "b"), entry(ADD, "c"), entry(DELETE, "b"),
               entry(ADD, "b", level=1)]
    assert _names(live_files(history)) == [("ADD", "a"), ("ADD", "c"), ("ADD", "b")]


def test_live_files_refuses_delete_of_a_file_never_added() -> None:
    with pytest.raises(ManifestMergeError, match=r"delete file 'ghost'.*not previously added"):
        live_files([entry(ADD, "a"), entry(DELETE, "ghost", bucket=1)])


def test_merge_accepts_any_iterable() -> None:
    assert merge_entries(iter([])) == [] and live_files(e for e in [entry(ADD, "a")]) == [entry(ADD, "a")]
