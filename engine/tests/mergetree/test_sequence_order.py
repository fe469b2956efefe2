"""sequence.field ordering: Java's comparison order per type, nulls first, ties by arrival."""

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest
from mergetree_helpers import by_key, kv, merge, rows

from strata.mergetree.merge_function import DeduplicateMerge, merge_function_for
from strata.mergetree.sequence import KeyGroups, SequenceOrder, order_key, tuple_rank


def _sorted_by_key(array: pa.Array) -> list:
    keys, valid = order_key(array)
    assert valid.all()
    return [array[int(i)].as_py() for i in np.argsort(keys, kind="stable")]


def test_double_order_is_java_double_compare():
    values = [1.5, -0.0, float("nan"), -2.0, 0.0, float("inf"), float("-inf")]
    ordered = _sorted_by_key(pa.array(values, pa.float64()))
    assert ordered[:3] == [float("-inf"), -2.0, -0.0] and str(ordered[2]) == "-0.0"
    assert ordered[3:6] == [0.0, 1.5, float("inf")] and str(ordered[3]) == "0.0"
    assert np.isnan(ordered[6])  # NaN is above +inf (Double.compare)


def test_float_order():
    ordered = _sorted_by_key(pa.array([3.0, -1.0, float("nan"), 0.5], pa.float32()))
    assert ordered[:3] == [-1.0, 0.5, 3.0] and np.isnan(ordered[3])


@pytest.mark.parametrize("precision", [10, 30])
def test_decimal_order(precision):
    values = [decimal.Decimal(v) for v in ("1.50", "-3.25", "0.00", "100.01", "-0.01")]
    ordered = _sorted_by_key(pa.array(values, pa.decimal128(precision, 2)))
    assert ordered == sorted(values)


def test_string_order_is_bytewise():
    ordered = _sorted_by_key(pa.array(["b", "B", "é", "a", ""]))
    assert ordered == ["", "B", "a", "b", "é"]


def test_timestamp_date_and_sliced_arrays():
    ts = pa.array([dt.datetime(2024, 1, 2), dt.datetime(2023, 5, 1), dt.datetime(2024, 1, 1)], pa.timestamp("us"))
    assert _sorted_by_key(ts) == sorted(ts.to_pylist())
    dec = pa.array([decimal.Decimal(x) for x in ("9", "1", "5", "3")], pa.decimal128(5, 0)).slice(1)
    assert _sorted_by_key(dec) == [1, 3, 5]


def test_tuple_rank_nulls_smallest():
    a = pa.array([None, 1, 1, 2, None, 1])
    b = pa.array([None, None, 1, None, 0, 1])
    rank = tuple_rank([a, b])
    assert rank[0] == 0 and rank[4] > 0  # only an all-null tuple is "empty"
    # (null, 0) < (1, null) < (1, 1) == (1, 1) < (2, null)
    assert rank[4] < rank[1] < rank[2] == rank[5] < rank[3]


def _table(keys, seq_values):
    return kv(keys, s=pa.array(seq_values, pa.int64()), v=list(range(len(keys))))


def test_reorder_ascending_nulls_first_ties_by_arrival():
    t = _table([1, 1, 1, 1, 2, 2], [5, None, 5, 2, 1, 0])
    out = SequenceOrder(["s"]).reorder(t, ["_KEY_k"])
    assert out.column("v").to_pylist() == [1, 3, 0, 2, 5, 4]


def test_reorder_descending_keeps_nulls_first():
    t = _table([1, 1, 1, 1], [5, None, 9, 2])
    out = SequenceOrder(["s"], descending=True).reorder(t, ["_KEY_k"])
    assert out.column("v").to_pylist() == [1, 2, 0, 3]


def test_reorder_two_fields():
    t = kv([1, 1, 1, 1], a=[1, 1, 0, 1], b=[3, 1, 9, None], v=[0, 1, 2, 3])
    out = SequenceOrder(["a", "b"]).reorder(t, ["_KEY_k"])
    assert out.column("v").to_pylist() == [2, 3, 1, 0]


def test_already_ordered_is_not_copied():
    t = _table([1, 1, 2], [1, 2, 0])
    assert SequenceOrder(["s"]).permutation(t, KeyGroups.of_table(t, ["_KEY_k"])) is None


def test_deduplicate_with_sequence_field():
    mf = merge_function_for({"sequence.field": "s"})
    assert isinstance(mf, DeduplicateMerge)
    t = _table([1, 1, 1, 2, 2, 3], [7, 3, 5, None, 4, None])
    got = by_key(merge(mf, t))
    assert {k: r["v"] for k, r in got.items()} == {1: 0, 2: 4, 3: 5}


def test_deduplicate_sequence_field_descending_and_delete():
    mf = merge_function_for({"sequence.field": "s", "sequence.field.sort-order": "descending"})
    t = kv([1, 1, 2, 2], kinds=["+I", "-D", "+I", "-D"], s=[1, 5, 1, 0], v=[0, 1, 2, 3])
    out = rows(merge(mf, t))
    # descending: the smallest sequence value is merged last
    assert [(r["k"], r["v"], r["_kind"]) for r in out] == [(1, 0, "+I"), (2, 3, "-D")]


def test_sequence_tie_broken_by_sequence_number_across_runs():
    mf = merge_function_for({"sequence.field": "s"})
    old = kv([1], seq=[0], s=[5], v=["old"])
    new = kv([1], seq=[1], s=[5], v=["new"])
    assert by_key(merge(mf, new, old))[1]["v"] == "new"
    assert by_key(merge(mf, old, new))[1]["v"] == "new"


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("null_share", [0.0, 0.3, 1.0])
def test_winners_fast_path_matches_the_full_order(descending, null_share):
    rng = np.random.default_rng(7)
    n = 2000
    keys = np.sort(rng.integers(0, 300, n))
    seq = pa.array(rng.integers(-3, 3, n), mask=rng.random(n) < null_share)
    t = kv(keys.tolist(), s=seq, v=list(range(n)))
    groups = KeyGroups.of_table(t, ["_KEY_k"])
    order = SequenceOrder(["s"], descending).permutation(t, groups)
    expected = groups.ends if order is None else order[groups.ends]
    assert (SequenceOrder(["s"], descending).winners(t, groups) == expected).all()
