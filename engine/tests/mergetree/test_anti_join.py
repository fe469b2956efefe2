"""The unordered anti-join merge (mergetree/anti_join.py) against the general sorted merge: the
same rows, retractions included, for every engine it takes; None where it must not apply."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mergetree_helpers import KEYS, kv, rows

from strata.mergetree.anti_join import anti_join_merge
from strata.mergetree.merge_function import (
    DeduplicateMerge,
    FirstRowMerge,
    MergeError,
    MergeFunction,
    merge_function_for,
)
from strata.mergetree.merge_reader import merge_runs
from strata.schema.table_schema import SEQUENCE_NUMBER

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None)
ENGINES: dict[str, DeduplicateMerge | FirstRowMerge] = {
    "deduplicate": DeduplicateMerge(),
    "deduplicate-ignore-delete": DeduplicateMerge(ignore_delete=True),
    "first-row-ignore-delete": FirstRowMerge(ignore_delete=True),
}


def key_sorted(tables: list[pa.Table], live_only: bool = False) -> list[dict[str, Any]]:
    """Rows (kinds included unless live_only) in key order, whatever order the merge produced."""
    return sorted((r for t in tables for r in rows(t, live_only)), key=lambda r: r["k"])


def sorted_merge(runs: list[list[pa.Table]], mf: Any) -> list[pa.Table]:
    return list(merge_runs([iter(r) for r in runs], KEYS, mf))


def unordered_merge(runs: list[list[pa.Table]], mf: Any) -> list[pa.Table]:
    return list(merge_runs([iter(r) for r in runs], KEYS, mf, ordered=False))


def merge_without_sequences(runs: list[list[pa.Table]], mf: Any) -> list[pa.Table]:
    """The merge a full read does when the files' metadata give each run's sequence range: the
    runs come without the sequence column."""
    runs = [r for r in runs if any(t.num_rows for t in r)]
    ranges = [(min(pc.min(t.column(SEQUENCE_NUMBER)).as_py() for t in r if t.num_rows),
               max(pc.max(t.column(SEQUENCE_NUMBER)).as_py() for t in r if t.num_rows)) for r in runs]
    stripped = [[t.drop_columns([SEQUENCE_NUMBER]) for t in r] for r in runs]
    return list(merge_runs([iter(r) for r in stripped], KEYS, mf, ordered=False, ranges=ranges))


@st.composite
def lsm_runs(draw: Any, with_retractions: bool) -> list[list[pa.Table]]:
    """Sorted runs of unique keys with disjoint sequence ranges, dealt in a random order, each
    split into random batches (a run of several files)."""
    kinds = ["+I", "+U", "-U", "-D"] if with_retractions else ["+I", "+U"]
    runs, next_seq = [], 0
    for _ in range(draw(st.integers(1, 6))):
        keys = sorted(draw(st.sets(st.integers(-20, 40), min_size=0, max_size=25)))
        n = len(keys)
        table = kv(keys, [draw(st.sampled_from(kinds)) for _ in keys], seq=range(next_seq, next_seq + n),
                   v=[draw(st.integers(0, 9)) for _ in keys])
        next_seq += n + draw(st.integers(0, 3))
        cut = draw(st.integers(0, n))
        runs.append([table.slice(0, cut), table.slice(cut)])
    return draw(st.permutations(runs))


@pytest.mark.parametrize("engine", sorted(ENGINES))
@SETTINGS
@given(data=st.data())
def test_same_rows_as_the_sorted_merge(engine: str, data: st.DataObject) -> None:
    mf = ENGINES[engine]
    runs = data.draw(lsm_runs(with_retractions=mf.ignore_delete or isinstance(mf, DeduplicateMerge)))
    assert anti_join_merge(runs, KEYS, mf) is not None  # the fast path is the one compared here
    # with ignore-delete the sorted merge keeps the retractions of a run it need not merge, which
    # readers drop: only the visible rows must agree there
    live_only = mf.ignore_delete
    expected = key_sorted(sorted_merge(runs, mf), live_only)
    assert key_sorted(unordered_merge(runs, mf), live_only) == expected
    assert key_sorted(merge_without_sequences(runs, mf), live_only) == expected


def test_newest_run_wins_and_deletes_survive_for_the_reader() -> None:
    base = kv([1, 2, 3], seq=[0, 1, 2], v=[10, 20, 30])
    update = kv([2, 3], ["+U", "-D"], seq=[5, 6], v=[21, None])
    merged = anti_join_merge([[base], [update]], KEYS, DeduplicateMerge())
    assert merged is not None
    assert key_sorted(merged) == [{"k": 1, "v": 10, "_kind": "+I"}, {"k": 2, "v": 21, "_kind": "+U"},
                                  {"k": 3, "v": None, "_kind": "-D"}]
    # first-row keeps the oldest record instead
    first = anti_join_merge([[base], [kv([2], seq=[5], v=[99])]], KEYS, FirstRowMerge())
    assert first is not None and [r["v"] for r in key_sorted(first)] == [10, 20, 30]


def test_sparse_keys_use_the_sorted_key_set() -> None:
    """Keys too far apart for a bitmap (timestamps, hashes) take the searchsorted path."""
    big = 1 << 60
    old = kv([-big, 0, big], seq=[0, 1, 2], v=[1, 2, 3])
    new = kv([0, big], seq=[3, 4], v=[20, 30])
    merged = anti_join_merge([[old], [new]], KEYS, DeduplicateMerge())
    assert merged is not None and [r["v"] for r in key_sorted(merged)] == [1, 20, 30]


@pytest.mark.parametrize("case", ["overlapping sequences", "duplicate keys in a run", "string key",
                                  "sequence field", "partial-update"])
def test_falls_back_to_the_sorted_merge(case: str) -> None:
    old, new = kv([1, 2], seq=[0, 5], v=[1, 2]), kv([2, 3], seq=[3, 4], v=[20, 30])
    runs, keys = [[old], [new]], KEYS
    mf: MergeFunction = DeduplicateMerge()
    if case == "duplicate keys in a run":
        runs = [[kv([1, 1], seq=[0, 1], v=[1, 2])], [kv([3], seq=[2], v=[3])]]
    elif case == "string key":
        keys = ["s"]
        runs = [[t.append_column("s", pa.array(["a", "b"]))] for t in (kv([1, 2], seq=[0, 1]),
                                                                       kv([1, 2], seq=[2, 3]))]
    elif case == "sequence field":
        mf = merge_function_for({"sequence.field": "v"})
    elif case == "partial-update":
        mf = merge_function_for({"merge-engine": "partial-update"})
    assert anti_join_merge(runs, keys, mf) is None
    if keys == KEYS:  # and merge_runs still merges these runs correctly
        assert key_sorted(unordered_merge(runs, mf)) == key_sorted(sorted_merge(runs, mf))


def test_runs_read_without_sequences_fall_back_on_stand_ins() -> None:
    # a level-0 file holding a key twice (in sequence order): the anti-join cannot take it, the
    # general merge then runs on stand-in sequences that keep the runs' and the records' order
    runs = [[kv([1, 1, 2], seq=[3, 4, 5], v=[10, 11, 20])], [kv([1, 2, 3], seq=[0, 1, 2], v=[1, 2, 3])]]
    for mf in (DeduplicateMerge(), FirstRowMerge()):
        assert key_sorted(merge_without_sequences(runs, mf)) == key_sorted(sorted_merge(runs, mf))
    assert [r["v"] for r in key_sorted(merge_without_sequences(runs, DeduplicateMerge()))] == [11, 20, 3]


def test_first_row_still_refuses_retractions() -> None:
    runs = [[kv([1], seq=[0], v=[1])], [kv([1], ["-D"], seq=[1], v=pa.array([None], pa.int64()))]]
    assert anti_join_merge(runs, KEYS, FirstRowMerge()) is None
    with pytest.raises(MergeError, match="first-row"):
        unordered_merge(runs, FirstRowMerge())


def test_no_rows() -> None:
    assert anti_join_merge([[kv([], seq=[])], []], KEYS, DeduplicateMerge()) == []
    assert unordered_merge([], DeduplicateMerge()) == []
