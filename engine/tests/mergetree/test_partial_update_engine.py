"""The partial-update merge engine; the sequence-group cases are Paimon's own
(PartialUpdateMergeFunctionTest and the partial-update docs), replayed record by record."""

import numpy as np
import pyarrow as pa
import pytest
from mergetree_helpers import kv, merge, rows

from strata.errors import OptionError
from strata.mergetree.merge_function import MergeError, merge_function_for
from strata.mergetree.partial_update import PartialUpdateConfig


def partial(**options: str):
    return merge_function_for({"merge-engine": "partial-update", **options})


def replay(mf, names, steps):
    """Apply records one by one (kind, *values); after each, merging all records so far must
    give the expected values (None = not checked). Every prefix is merged at once."""
    records = []
    for kind, values, expected in steps:
        records.append((kind, values))
        if expected is None:
            continue
        columns = {n: pa.array([r[1][i] for r in records], pa.int32()) for i, n in enumerate(names)}
        t = kv([1] * len(records), [r[0] for r in records], **columns)
        (row,) = rows(merge(mf, t))
        assert tuple(row[n] for n in names) == expected, (records, row)


F6 = ["f1", "f2", "f3", "f4", "f5", "f6"]


def test_update_non_null():
    replay(partial(), F6, [("+I", (1, 1, 1, 1, 1, 1), None),
                           ("+I", (2, 2, 2, 2, 2, None), (2, 2, 2, 2, 2, 1))])


def test_sequence_group():
    mf = partial(**{"fields.f3.sequence-group": "f1,f2", "fields.f6.sequence-group": "f4,f5"})
    replay(mf, F6, [
        ("+I", (1, 1, 1, 1, 1, 1), None),
        ("+I", (2, 2, 2, 2, 2, None), (2, 2, 2, 1, 1, 1)),
        ("+I", (3, 3, 1, 3, 3, 3), (2, 2, 2, 3, 3, 3)),
        ("-D", (1, 1, 3, 1, 1, None), (None, None, 3, 3, 3, 3)),
        ("-D", (1, 1, 3, 1, 1, 4), (None, None, 3, None, None, 4)),
        ("+I", (4, 4, 4, 5, 5, 5), (4, 4, 4, 5, 5, 5)),
        ("-D", (1, 1, 6, 1, 1, 6), (None, None, 6, None, None, 6)),
    ])


def test_sequence_group_partial_delete():
    mf = partial(**{"fields.f3.sequence-group": "f1,f2", "fields.f6.sequence-group": "f4,f5",
                    "partial-update.remove-record-on-sequence-group": "f6"})
    replay(mf, F6, [
        ("+I", (1, 1, 1, 1, 1, 1), None),
        ("+I", (2, 2, 2, 2, 2, None), (2, 2, 2, 1, 1, 1)),
        ("+I", (3, 3, 1, 3, 3, 3), (2, 2, 2, 3, 3, 3)),
        ("-D", (1, 1, 3, 1, 1, None), (None, None, 3, 3, 3, 3)),
        ("-D", (1, 1, 3, 1, 1, 4), (1, 1, 3, 1, 1, 4)),
        ("+I", (4, 4, 4, 5, 5, 5), (4, 4, 4, 5, 5, 5)),
        ("-D", (1, 1, 6, 1, 1, 6), (1, 1, 6, 1, 1, 6)),
    ])


def test_partial_delete_kind():
    mf = partial(**{"fields.g.sequence-group": "a", "partial-update.remove-record-on-sequence-group": "g"})
    t = kv([1, 1, 2, 2, 2, 3, 3], ["+I", "-D", "+I", "-D", "+I", "+I", "-D"],
           a=[1, 2, 1, 2, 3, 5, 6], g=[1, 2, 1, 2, 3, 5, 4])
    out = {r["k"]: (r["a"], r["g"], r["_kind"]) for r in rows(merge(mf, t))}
    # 3: the -D is older than the stored sequence: neither a removal nor a retraction
    assert out == {1: (2, 2, "-D"), 2: (3, 3, "+I"), 3: (5, 5, "+I")}


F8 = ["f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8"]


def test_multi_field_sequence_groups():
    mf = partial(**{"fields.f3,f4.sequence-group": "f1,f2", "fields.f7,f8.sequence-group": "f5,f6"})
    replay(mf, F8, [
        ("+I", (None, None, None, None, 1, 1, 1, 3), None),
        ("+I", (2, 2, None, None, 2, 2, 1, 3), (None, None, None, None, 2, 2, 1, 3)),
    ])
    replay(mf, F8, [
        ("+I", (1, 1, 1, 1, 1, 1, 1, 3), None),
        ("+I", (2, 2, 2, 2, 2, 1, 1, None), (2, 2, 2, 2, 1, 1, 1, 3)),
        ("+I", (1, 3, 1, 3, 3, 3, 3, 2), (2, 2, 2, 2, 3, 3, 3, 2)),
        ("-D", (1, 1, 3, 3, 1, 1, None, None), (None, None, 3, 3, 3, 3, 3, 2)),
        ("-D", (1, 1, 3, 1, 1, 1, 4, 4), (None, None, 3, 3, None, None, 4, 4)),
        ("+I", (4, 4, 4, 4, 5, 5, 5, 5), (4, 4, 4, 4, 5, 5, 5, 5)),
        ("-D", (1, 1, 6, 1, 1, 1, 6, 1), (None, None, 6, 1, None, None, 6, 1)),
    ])


def test_docs_aggregation_in_sequence_groups():
    mf = partial(**{"fields.a.sequence-group": "b", "fields.b.aggregate-function": "first_value",
                    "fields.c.sequence-group": "d", "fields.d.aggregate-function": "sum"})
    replay(mf, ["a", "b", "c", "d"], [
        ("+I", (1, 1, None, None), None), ("+I", (None, None, 1, 1), None),
        ("+I", (2, 2, None, None), None), ("+I", (None, None, 2, 2), (2, 1, 2, 3))])
    mf = partial(**{"fields.a.sequence-group": "b", "fields.c.sequence-group": "d",
                    "fields.default-aggregate-function": "last_non_null_value", "fields.d.aggregate-function": "sum"})
    replay(mf, ["a", "b", "c", "d"], [
        ("+I", (1, 1, None, None), None), ("+I", (None, None, 1, 1), None),
        ("+I", (2, 2, None, None), None), ("+I", (None, None, 2, 2), (2, 2, 2, 3))])


def test_docs_multi_field_group_with_aggregation():
    mf = partial(**{"fields.a.aggregate-function": "sum", "fields.g_1,g_3.sequence-group": "a",
                    "fields.g_2.sequence-group": "c"})
    names = ["a", "b", "g_1", "c", "g_2", "g_3"]
    replay(mf, names, [
        ("+I", (1, 1, 1, 1, 1, 1), None),
        ("+I", (2, 2, 2, 2, None, 2), (3, 2, 2, 1, 1, 2)),
        # (g_1, g_3) = (2, 1) is older: the sequence is not advanced but the sum still applies
        ("+I", (3, 3, 2, 3, 3, 1), (6, 3, 2, 3, 3, 2)),
    ])


def test_out_of_order_group_aggregation_follows_group_sequence():
    mf = partial(**{"fields.g.sequence-group": "v,f,l", "fields.v.aggregate-function": "last_non_null_value",
                    "fields.f.aggregate-function": "first_value", "fields.l.aggregate-function": "listagg"})
    t = kv([1, 1, 1, 1], g=[2, 1, 3, None], v=["b", "a", None, "z"], f=["b", "a", "c", "z"],
           l=["b", "a", "c", "z"])
    (row,) = rows(merge(mf, t))
    assert (row["g"], row["v"], row["f"], row["l"]) == (3, "b", "a", "a,b,c")


def test_group_retraction_of_aggregates():
    mf = partial(**{"fields.g.sequence-group": "s,lv", "fields.s.aggregate-function": "sum",
                    "fields.lv.aggregate-function": "last_value"})
    t = kv([1, 1, 1, 2, 2], ["+I", "+I", "-U", "+I", "-D"], g=[1, 2, 1, 1, 2], s=[10, 5, 3, 4, 4],
           lv=["a", "b", "x", "c", "c"])
    out = {r["k"]: (r["g"], r["s"], r["lv"], r["_kind"]) for r in rows(merge(mf, t))}
    assert out == {1: (2, 12, None, "+I"), 2: (2, 0, None, "+I")}
    # an older insert after a newer retraction is still summed (on the left of the accumulator)
    t = kv([1, 1, 1], ["+I", "-U", "+I"], g=[0, 1, 0], s=[None, None, 1], lv=[None, None, "z"])
    assert [(r["g"], r["s"], r["lv"]) for r in rows(merge(mf, t))] == [(1, 1, None)]
    mf = partial(**{"fields.g.sequence-group": "v", "fields.v.aggregate-function": "max"})
    with pytest.raises(MergeError, match="ignore-retract"):
        merge(mf, kv([1, 1], ["+I", "-D"], g=[1, 2], v=[1, 1]))


def test_deletes_refused_without_an_option():
    mf = partial()
    with pytest.raises(MergeError, match="ignore-delete") as err:
        merge(mf, kv([1, 1], ["+I", "-D"], v=[1, 1]))
    assert "partial-update.remove-record-on-delete" in str(err.value)
    with pytest.raises(MergeError, match="remove-record-on-sequence-group"):
        mf.check_kinds(np.array([0, 1], dtype=np.int8), ["k", "v"])


def test_ignore_delete():
    mf = partial(**{"ignore-delete": "true"})
    t = kv([1, 1, 1, 2], ["+I", "-D", "+I", "-D"], a=[1, 9, None, 5], b=[None, 9, 2, 5])
    assert rows(merge(mf, t)) == [{"k": 1, "a": 1, "b": 2, "_kind": "+I"}]


def test_remove_record_on_delete():
    mf = partial(**{"partial-update.remove-record-on-delete": "true"})
    t = kv([1, 1, 1, 2, 2, 3, 3, 4, 4], ["+I", "-D", "+I", "+I", "-D", "+I", "-U", "-U", "+U"],
           a=[1, 9, None, 1, 2, 1, 7, 3, None], b=[2, None, 3, 1, 2, 1, 7, 3, 4])
    out = {r["k"]: (r["a"], r["b"], r["_kind"]) for r in rows(merge(mf, t))}
    # 1: the -D resets the row to its own values, then b=3 lands on it; 3: a -U is skipped;
    # 4: a key starting with a retraction starts from its values
    assert out == {1: (9, 3, "+I"), 2: (2, 2, "-D"), 3: (1, 1, "+I"), 4: (3, 4, "+I")}
    only_retractions = rows(merge(mf, kv([1, 2, 2], ["-U", "-U", "-D"], a=[1, 2, 3], b=[1, 2, 3])))
    assert [(r["k"], r["_kind"]) for r in only_retractions] == [(1, "-U"), (2, "-D")]


def test_sequence_field_orders_partial_update():
    mf = partial(**{"sequence.field": "ts"})
    t = kv([1, 1, 1], ts=[3, 1, 2], a=["new", "old", None], b=[None, "old", "mid"])
    assert rows(merge(mf, t)) == [{"k": 1, "ts": 3, "a": "new", "b": "mid", "_kind": "+I"}]


def test_required_columns_for_projection():
    mf = partial(**{"fields.g.sequence-group": "a", "fields.h.sequence-group": "b",
                    "fields.r.sequence-group": "c", "partial-update.remove-record-on-sequence-group": "r",
                    "sequence.field": "ts"})
    assert sorted(mf.required_columns(["k", "a"])) == ["g", "r", "ts"]
    with pytest.raises(KeyError, match="sequence-group"):
        merge(mf, kv([1], a=[1], ts=[1], r=[1]))


@pytest.mark.parametrize("options,culprit", [
    ({"fields.g.sequence-group": "a", "fields.h.sequence-group": "a"}, "already belongs"),
    ({"fields.g.sequence-group": "k"}, "primary-key"),
    ({"fields.a.aggregate-function": "sum"}, "sequence group"),
    ({"fields.g.sequence-group": "a", "partial-update.remove-record-on-delete": "true"}, "remove-record-on-delete"),
    ({"ignore-delete": "true", "partial-update.remove-record-on-delete": "true"}, "ignore-delete"),
    ({"partial-update.remove-record-on-sequence-group": "a"}, "not a sequence field"),
    ({"fields.s.sequence-group": "a"}, "sequence group needs"),
    ({"fields.g.sequence-group": "nope"}, "not a column"),
])
def test_invalid_options(options, culprit):
    types = {"k": ("INT", None), "a": ("INT", None), "g": ("BIGINT", None), "h": ("INT", None),
             "s": ("VARCHAR", 2147483647)}
    with pytest.raises(OptionError, match=culprit):
        PartialUpdateConfig.parse(options, ["k"], types, "table t")
