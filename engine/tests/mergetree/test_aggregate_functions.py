"""The aggregation merge engine, function by function (semantics of Paimon's Field*Agg)."""

import decimal

import numpy as np
import pyarrow as pa
import pytest
from mergetree_helpers import by_key, kv, merge, rows

from strata.mergetree.merge_function import MergeError, merge_function_for

D = decimal.Decimal


def agg(function: str, **options: str):
    opts = {"merge-engine": "aggregation", "fields.v.aggregate-function": function}
    opts.update(options)
    return merge_function_for(opts)


def merged_v(mf, keys, values, kinds=None, type=None):
    out = merge(mf, kv(keys, kinds, v=pa.array(values, type)))
    return {r["k"]: r["v"] for r in rows(out)}


# -- sum ---------------------------------------------------------------------------------------------

def test_sum_ignores_nulls_and_subtracts_retractions():
    mf = agg("sum")
    got = merged_v(mf, [1, 1, 1, 2, 2, 3], [5, None, 7, None, None, 4], ["+I", "+I", "+I", "+I", "+I", "-D"],
                   pa.int64())
    assert got == {1: 12, 2: None, 3: -4}  # a lone retraction becomes its negation
    out = rows(merge(mf, kv([1, 1, 1], ["+I", "-U", "+U"], v=pa.array([10, 10, 3], pa.int32()))))
    assert out == [{"k": 1, "v": 3, "_kind": "+I"}]


def test_retract_only_key_merges_to_an_insert():
    out = rows(merge(agg("sum"), kv([1], ["-D"], v=[4])))
    assert out == [{"k": 1, "v": -4, "_kind": "+I"}]


@pytest.mark.parametrize("type,values", [(pa.int8(), [100, 100]), (pa.int32(), [2**31 - 1, 1]),
                                         (pa.int64(), [2**63 - 1, 1])])
def test_sum_overflow_raises(type, values):
    with pytest.raises(MergeError, match="overflows"):
        merged_v(agg("sum"), [1, 1], values, type=type)


def test_sum_large_int64_without_overflow_is_exact():
    assert merged_v(agg("sum"), [1, 1, 1], [2**62, 2**62, -(2**62)], type=pa.int64()) == {1: 2**62}


def test_sum_floats_and_decimals():
    assert merged_v(agg("sum"), [1, 1, 1], [1.5, None, 2.25], type=pa.float32()) == {1: 3.75}
    got = merged_v(agg("sum"), [1, 1, 1, 2, 2], [D("1.10"), D("2.05"), D("0.50"), D("9.99"), D("0.01")],
                   ["+I", "+I", "-U", "+I", "+I"], pa.decimal128(3, 2))
    assert got == {1: D("2.65"), 2: None}  # 10.00 needs precision 4: null, as Decimal.fromBigDecimal


# -- product -----------------------------------------------------------------------------------------

def test_product():
    assert merged_v(agg("product"), [1, 1, 1, 2], [3, None, -4, None], type=pa.int32()) == {1: -12, 2: None}
    assert merged_v(agg("product"), [1, 1], [1.5, 4.0], type=pa.float64()) == {1: 6.0}
    assert merged_v(agg("product"), [1, 1], [D("1.5"), D("2.5")], type=pa.decimal128(5, 1)) == {1: D("3.8")}


def test_product_retraction_divides_in_order():
    mf = agg("product")
    kinds = ["+I", "-U", "+I", "-D", "+I", "+I", "-D", "+I", "-D"]
    got = merged_v(mf, [1, 1, 1, 2, 2, 3, 3, 4, 4], [6, 4, 3, 2, 5, -7, 2, 8, 3], kinds, pa.int64())
    # 6 / 4 = 1 (truncated) * 3; a retraction before any insert is ignored; -7 / 2 = -3 (toward zero)
    assert got == {1: 3, 2: 5, 3: -3, 4: 2}
    assert merged_v(mf, [1, 1], [2.0, 8.0], ["+I", "-D"], pa.float64()) == {1: 0.25}
    with pytest.raises(MergeError, match="overflows"):
        merged_v(mf, [1, 1, 1], [2**40, 2**40, 2], ["+I", "+I", "-D"], pa.int64())


# -- max / min / bool ----------------------------------------------------------------------------------

def test_max_min_over_non_nulls():
    assert merged_v(agg("max"), [1, 1, 1, 2], [3, None, 9, None]) == {1: 9, 2: None}
    assert merged_v(agg("min"), [1, 1, 1], ["b", None, "a"]) == {1: "a"}
    assert merged_v(agg("max"), [1, 1, 1], [D("1.5"), D("-2.0"), D("1.25")], type=pa.decimal128(20, 2)) == \
        {1: D("1.50")}
    assert merged_v(agg("min"), [1, 1], [0.0, -0.0], type=pa.float64()) == {1: 0.0}
    got = merged_v(agg("min"), [1, 1], [-0.0, 0.0], type=pa.float64())
    assert str(got[1]) == "-0.0"  # Double.compare: -0.0 < 0.0


def test_bool_and_or():
    assert merged_v(agg("bool_and"), [1, 1, 1, 2, 3], [True, None, False, None, True]) == \
        {1: False, 2: None, 3: True}
    assert merged_v(agg("bool_or"), [1, 1, 2], [False, True, False]) == {1: True, 2: False}


@pytest.mark.parametrize("function", ["max", "min", "first_value", "first_non_null_value", "listagg",
                                      "bool_and", "bool_or"])
def test_retraction_refused_unless_ignore_retract(function):
    values = {"listagg": ["a", "b"], "bool_and": [True, False], "bool_or": [True, False]}.get(function, [1, 2])
    with pytest.raises(MergeError, match=r"fields\.v\.ignore-retract"):
        merged_v(agg(function), [1, 1], values, ["+I", "-U"])
    mf = agg(function, **{"fields.v.ignore-retract": "true"})
    assert merged_v(mf, [1, 1], values, ["+I", "-U"]) == {1: values[0]}


def test_ignore_delete_drops_retractions():
    mf = agg("max", **{"ignore-delete": "true"})
    mf.check_kinds(np.array([0, 1, 3], dtype=np.int8), ["k", "v"])
    assert merged_v(mf, [1, 1, 1, 2], [3, 9, 4, 5], ["+I", "-U", "+I", "-D"]) == {1: 4}


def test_check_kinds_refuses_at_write_time():
    mf = agg("max")
    with pytest.raises(MergeError, match="max"):
        mf.check_kinds(np.array([0, 3], dtype=np.int8), ["k", "v"])
    mf.check_kinds(np.array([0, 0], dtype=np.int8), ["k", "v"])
    agg("sum").check_kinds(np.array([3], dtype=np.int8), ["k", "v"])


# -- first / last ----------------------------------------------------------------------------------

def test_last_value_and_last_non_null_value():
    keys, values = [1, 1, 2, 2, 3, 3, 3], [1, None, 1, 5, 1, 5, None]
    kinds = ["+I", "+I", "+I", "-D", "+I", "-D", "+I"]
    assert merged_v(agg("last_value"), keys, values, kinds) == {1: None, 2: None, 3: None}
    assert merged_v(agg("last_non_null_value"), keys, values, kinds) == {1: 1, 2: None, 3: None}
    assert merged_v(agg("last_non_null_value"), [1, 1, 1], [1, 2, None]) == {1: 2}
    # the default function is last_non_null_value
    assert merged_v(merge_function_for({"merge-engine": "aggregation"}), [1, 1], [7, None]) == {1: 7}


def test_first_value_and_first_non_null_value():
    assert merged_v(agg("first_value"), [1, 1, 2], [None, 2, 3]) == {1: None, 2: 3}
    assert merged_v(agg("first_non_null_value"), [1, 1, 1], [None, 2, 3]) == {1: 2}
    assert merged_v(agg("first_not_null_value"), [1, 1], [None, "x"]) == {1: "x"}  # legacy name


# -- listagg ------------------------------------------------------------------------------------------

def test_listagg_skips_blank_values():
    got = merged_v(agg("listagg"), [1, 1, 1, 1, 1, 2, 3], ["a", None, " ", "", "b", None, "  "])
    assert got == {1: "a,b", 2: None, 3: None}
    mf = agg("listagg", **{"fields.v.list-agg-delimiter": " | "})
    assert merged_v(mf, [1, 1], ["x", "y"]) == {1: "x | y"}


def test_listagg_distinct():
    mf = agg("listagg", **{"fields.v.distinct": "true"})
    assert merged_v(mf, [1, 1, 1, 1], ["a,b", "b,c", "a", "c,,d"]) == {1: "a,b,c,d"}
    # the first value is kept as it is; later tokens are appended only if new
    assert merged_v(mf, [1, 1, 2], ["a,a,", "a,b,b", "x"]) == {1: "a,a,,b", 2: "x"}


# -- collect / merge_map (Arrow list and map columns; table-level cases in test_nested_aggregates.py) -----

LIST = pa.list_(pa.string())
MAP = pa.map_(pa.string(), pa.int64())


def test_collect():
    values = [["a", "b"], None, ["b", None], [], ["c"]]
    assert merged_v(agg("collect"), [1, 1, 1, 2, 3], values, type=LIST) == \
        {1: ["a", "b", "b", None], 2: [], 3: ["c"]}
    mf = agg("collect", **{"fields.v.distinct": "true"})
    assert merged_v(mf, [1, 1, 1, 2], [["a", "b", "a"], ["b", None, None], None, None], type=LIST) == \
        {1: ["a", "b", None], 2: None}


def test_collect_retraction_removes_earliest_occurrences():
    mf = agg("collect")
    kinds = ["+I", "-U", "+I", "-D", "+I", "+I", "-D", "-D"]
    values = [["a", "b", "a"], ["a"], ["c"], ["x"], ["x"], ["y"], ["y", "z"], ["q"]]
    got = merged_v(mf, [1, 1, 1, 2, 2, 3, 3, 4], values, kinds, LIST)
    # a retraction before any insert does nothing; retracting from an empty key leaves it null
    assert got == {1: ["b", "a", "c"], 2: ["x"], 3: [], 4: None}
    mf = agg("collect", **{"fields.v.distinct": "true"})
    got = merged_v(mf, [1, 1, 1, 1], [["a", "b"], ["a"], ["c"], ["a"]], ["+I", "-D", "+I", "+I"], LIST)
    assert got == {1: ["b", "c", "a"]}


def test_merge_map():
    values = [[("a", 1), ("b", 2)], [("b", 3)], None, None, [("x", None)]]
    assert merged_v(agg("merge_map"), [1, 1, 1, 2, 3], values, type=MAP) == \
        {1: {"a": 1, "b": 3}, 2: None, 3: {"x": None}}
    kinds = ["+I", "-D", "+I", "-U"]
    got = merged_v(agg("merge_map"), [1, 1, 1, 2], [[("a", 1), ("b", 2)], [("a", 9)], [("c", 3)], [("a", 1)]],
                   kinds, MAP)
    assert got == {1: {"b": 2, "c": 3}, 2: None}


# -- the whole row ----------------------------------------------------------------------------------

def test_per_field_functions_and_default():
    mf = merge_function_for({"merge-engine": "aggregation", "fields.default-aggregate-function": "max",
                             "fields.s.aggregate-function": "sum"})
    out = merge(mf, kv([1, 1, 2], s=[1, 2, 3], m=[5, 4, None], k2=["x", "y", "z"]))
    assert rows(out) == [{"k": 1, "s": 3, "m": 5, "k2": "y", "_kind": "+I"},
                         {"k": 2, "s": 3, "m": None, "k2": "z", "_kind": "+I"}]


def test_primary_key_fields_are_not_aggregated():
    mf = merge_function_for({"merge-engine": "aggregation", "fields.default-aggregate-function": "sum"})
    out = merge(mf, kv([7, 7, 7], v=[1, 2, 3]))
    assert rows(out) == [{"k": 7, "v": 6, "_kind": "+I"}]


def test_remove_record_on_delete():
    mf = agg("sum", **{"aggregation.remove-record-on-delete": "true"})
    t = kv([1, 1, 1, 2, 2, 3, 3], ["+I", "-D", "+I", "+I", "-D", "+I", "-U"], v=[5, 7, 1, 5, 6, 5, 2])
    out = {r["k"]: (r["v"], r["_kind"]) for r in rows(merge(mf, t))}
    # the -D replaces the row by its own values; later records aggregate onto them
    assert out == {1: (8, "+I"), 2: (6, "-D"), 3: (3, "+I")}


def test_sequence_field_orders_aggregation():
    mf = merge_function_for({"merge-engine": "aggregation", "sequence.field": "ts",
                             "fields.v.aggregate-function": "last_non_null_value",
                             "fields.f.aggregate-function": "first_value"})
    t = kv([1, 1, 1], ts=[3, 1, 2], v=["c", "a", None], f=["c", "a", "b"])
    assert rows(merge(mf, t)) == [{"k": 1, "ts": 3, "v": "c", "f": "a", "_kind": "+I"}]


def test_intermediate_results_of_runs_merge_to_the_same_result():
    mf = merge_function_for({"merge-engine": "aggregation", "fields.s.aggregate-function": "sum",
                             "fields.m.aggregate-function": "max", "fields.l.aggregate-function": "listagg"})
    runs = [kv([1, 2], seq=[0, 1], s=[1, 2], m=[3, 4], l=["a", "b"]),
            kv([1, 1], ["+I", "-U"], seq=[2, 3], s=[10, 1], m=[1, None], l=["c", None]),
            kv([2], seq=[4], s=[5], m=[9], l=["d"])]
    with pytest.raises(MergeError):  # listagg refuses the retraction
        merge(mf, *runs)
    mf = merge_function_for({"merge-engine": "aggregation", "fields.s.aggregate-function": "sum",
                             "fields.m.aggregate-function": "max", "fields.l.aggregate-function": "listagg",
                             "fields.m.ignore-retract": "true", "fields.l.ignore-retract": "true"})
    at_once = merge(mf, *runs)
    stepwise = merge(mf, merge(mf, merge(mf, runs[0]), merge(mf, runs[1])), merge(mf, runs[2]))
    assert by_key(at_once) == by_key(stepwise) == {
        1: {"k": 1, "s": 10, "m": 3, "l": "a,c"}, 2: {"k": 2, "s": 7, "m": 9, "l": "b,d"}}
