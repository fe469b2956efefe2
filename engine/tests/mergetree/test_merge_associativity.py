"""Property: merging runs step by step (flushes, partial compactions, in any tree shape) gives
the same visible rows as merging every record at once.

Runs are contiguous in arrival order, as in an LSM tree (a flush holds consecutive records and
universal compaction merges adjacent runs). Where merge order does not matter (deduplicate's
maximum, commutative aggregates) the records are also dealt to runs at random.

Cases Paimon itself merges differently depending on run boundaries are left out on purpose, and
documented in the modules: retractions that reach an empty accumulator (product, collect,
merge_map, last_non_null_value), rows re-seeded by a -D (remove-record-on-delete) or by a
leading retraction (partial-update), and out-of-order sequence values under order-sensitive
functions.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from mergetree_helpers import by_key, kv, merge

from strata.mergetree.merge_function import merge_function_for

SETTINGS = settings(max_examples=80, deadline=None, derandomize=True, database=None)
KEYS = st.integers(0, 1)
SMALL = st.none() | st.integers(-5, 5)


def build(columns: dict[str, pa.DataType], records: list[dict[str, Any]], seqs: list[int]) -> pa.Table:
    arrays = {n: pa.array([r.get(n) for r in records], t) for n, t in columns.items()}
    return kv([r["k"] for r in records], [r["kind"] for r in records], seq=seqs, **arrays)


@st.composite
def tree_merge(draw, mf, columns, records, contiguous=True):
    """(step-by-step results, at-once result): a random tree of merges over random runs, and
    (for contiguous runs) every split into two runs."""
    n = len(records)
    seqs = list(range(n))
    if contiguous:
        cuts = sorted(draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=6))) if n > 1 else []
        bounds = [0, *[c for c in cuts if c < n], n]
        leaves = [list(range(a, b)) for a, b in itertools.pairwise(bounds) if b > a]
    else:
        runs = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        leaves = [[i for i in range(n) if runs[i] == r] for r in sorted(set(runs))]
    tables = [merge(mf, build(columns, [records[i] for i in leaf], [seqs[i] for i in leaf])) for leaf in leaves]

    def combine(parts: list[pa.Table]) -> pa.Table:
        if len(parts) == 1:
            return parts[0]
        cut = draw(st.integers(1, len(parts) - 1))
        return merge(mf, combine(parts[:cut]), combine(parts[cut:]))

    results = [combine(tables)]
    if contiguous:  # and every split into two runs
        results += [merge(mf, merge(mf, build(columns, records[:i], seqs[:i])),
                          merge(mf, build(columns, records[i:], seqs[i:]))) for i in range(1, n)]
    at_once = merge(mf, build(columns, records, seqs))
    return results, at_once


def records_of(kinds, **fields):
    return st.lists(st.fixed_dictionaries({"k": KEYS, "kind": kinds, **fields}), min_size=1, max_size=14)


def check(data, options, columns, records, contiguous=True):
    mf = merge_function_for(options)
    results, at_once = data.draw(tree_merge(mf, columns, records, contiguous))
    expected = by_key(at_once)
    for stepwise in results:
        assert by_key(stepwise) == expected


INT = {"v": pa.int64()}
ALL_KINDS = st.sampled_from(["+I", "+U", "-U", "-D"])
INSERTS = st.sampled_from(["+I", "+U"])


@SETTINGS
@given(st.data(), records_of(ALL_KINDS, v=SMALL), st.booleans(), st.booleans())
def test_deduplicate(data, records, ignore_delete, contiguous):
    check(data, {"ignore-delete": str(ignore_delete).lower()}, INT, records, contiguous)


@SETTINGS
@given(st.data(), records_of(ALL_KINDS, v=SMALL, ts=SMALL), st.booleans())
def test_deduplicate_sequence_field(data, records, descending):
    options = {"sequence.field": "ts", "sequence.field.sort-order": "descending" if descending else "ascending"}
    check(data, options, {**INT, "ts": pa.int32()}, records, contiguous=False)


@SETTINGS
@given(st.data(), records_of(INSERTS, v=SMALL), records_of(ALL_KINDS, v=SMALL))
def test_first_row(data, inserts, mixed):
    check(data, {"merge-engine": "first-row"}, INT, inserts)
    check(data, {"merge-engine": "first-row", "ignore-delete": "true"}, INT, mixed)


PU_COLUMNS = {"a": pa.int64(), "b": pa.string()}


@SETTINGS
@given(st.data(), records_of(ALL_KINDS, a=SMALL, b=st.none() | st.sampled_from(["x", "y", "z"])))
def test_partial_update_ignore_delete(data, records):
    check(data, {"merge-engine": "partial-update", "ignore-delete": "true"}, PU_COLUMNS, records)


@SETTINGS
@given(st.data(), records_of(INSERTS, a=SMALL, b=st.none() | st.just("x")),
       st.lists(st.tuples(KEYS, st.integers(-5, 5)), max_size=6), st.randoms(use_true_random=False))
def test_partial_update_remove_record_on_delete(data, records, deletes, rnd):
    # a -D carries a whole row (as CDC deletes do): a row re-seeded from a partial -D is
    # boundary-dependent in Paimon as well
    for k, a in deletes:
        records.insert(rnd.randint(0, len(records)), {"k": k, "kind": "-D", "a": a, "b": "d"})
    check(data, {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
          PU_COLUMNS, records)


GROUP_COLUMNS = {"a": pa.int64(), "b": pa.int64(), "g": pa.int32(), "c": pa.string(), "g2": pa.int32(),
                 "g3": pa.int32(), "x": pa.int64()}
SEQ = st.none() | st.integers(0, 4)


@st.composite
def group_records(draw):
    out = draw(records_of(ALL_KINDS, a=SMALL, b=SMALL, g=SEQ, c=st.none() | st.sampled_from(["p", "q"]),
                          g2=SEQ, g3=SEQ, x=SMALL))
    for r in out:
        if r["kind"] in ("-U", "-D"):  # retractions carry only their sequences (see module doc)
            r.update(a=None, b=None, c=None, x=None)
    return out


@SETTINGS
@given(st.data(), group_records())
def test_partial_update_sequence_groups(data, records):
    options = {"merge-engine": "partial-update", "fields.g.sequence-group": "a,b", "fields.g2,g3.sequence-group": "c"}
    check(data, options, GROUP_COLUMNS, records)


@SETTINGS
@given(st.data(), group_records())
def test_partial_update_sequence_groups_with_commutative_aggregates(data, records):
    options = {"merge-engine": "partial-update", "fields.g.sequence-group": "a,b", "fields.a.aggregate-function": "sum",
               "fields.b.aggregate-function": "max", "fields.b.ignore-retract": "true",
               "fields.g2,g3.sequence-group": "c"}
    check(data, options, GROUP_COLUMNS, records)


@SETTINGS
@given(st.data(), records_of(INSERTS, a=SMALL, b=SMALL, c=st.none() | st.sampled_from(["p", "q", "p,q", " "]),
                             x=SMALL, ts=st.booleans()))
def test_partial_update_ordered_group_aggregates(data, records):
    # order-sensitive functions: the group sequence grows with arrival (or is null = skipped)
    for i, r in enumerate(records):
        r["g"] = i if r.pop("ts") else None
    options = {"merge-engine": "partial-update", "fields.g.sequence-group": "a,b,c",
               "fields.a.aggregate-function": "last_non_null_value", "fields.b.aggregate-function": "first_value",
               "fields.c.aggregate-function": "listagg", "fields.c.distinct": "true"}
    check(data, options, {"a": pa.int64(), "b": pa.int64(), "c": pa.string(), "g": pa.int32(), "x": pa.int64()},
          records)


AGG_COLUMNS = {"s": pa.int64(), "lv": pa.int64(), "mx": pa.int32(), "mn": pa.string(), "bo": pa.bool_()}


@SETTINGS
@given(st.data(), records_of(ALL_KINDS, s=SMALL, lv=SMALL, mx=SMALL, mn=st.none() | st.sampled_from(["a", "b"]),
                             bo=st.none() | st.booleans()), st.booleans())
def test_aggregation_with_retractions(data, records, contiguous):
    options = {"merge-engine": "aggregation", "fields.s.aggregate-function": "sum",
               "fields.lv.aggregate-function": "last_value", "fields.mx.aggregate-function": "max",
               "fields.mx.ignore-retract": "true", "fields.mn.aggregate-function": "min",
               "fields.mn.ignore-retract": "true", "fields.bo.aggregate-function": "bool_or",
               "fields.bo.ignore-retract": "true"}
    columns = AGG_COLUMNS if contiguous else {n: t for n, t in AGG_COLUMNS.items() if n != "lv"}
    check(data, options, columns, records, contiguous)


ORDERED_COLUMNS = {"nn": pa.int64(), "fv": pa.int64(), "fn": pa.int64(), "la": pa.string(), "ld": pa.string(),
                   "p": pa.int64(), "ba": pa.bool_()}


@SETTINGS
@given(st.data(), records_of(INSERTS, nn=SMALL, fv=SMALL, fn=SMALL, la=st.none() | st.sampled_from(["a", "b", ""]),
                             ld=st.none() | st.sampled_from(["a", "b,a", "c,,a", " "]),
                             p=st.none() | st.integers(-3, 3), ba=st.none() | st.booleans()))
def test_aggregation_order_sensitive_functions(data, records):
    options = {"merge-engine": "aggregation", "fields.nn.aggregate-function": "last_non_null_value",
               "fields.fv.aggregate-function": "first_value", "fields.fn.aggregate-function": "first_non_null_value",
               "fields.la.aggregate-function": "listagg", "fields.ld.aggregate-function": "listagg",
               "fields.ld.distinct": "true", "fields.p.aggregate-function": "product",
               "fields.ba.aggregate-function": "bool_and"}
    check(data, options, ORDERED_COLUMNS, records)


@SETTINGS
@given(st.data(), records_of(INSERTS, s=SMALL, lv=SMALL, ts=SEQ))
def test_aggregation_sequence_field(data, records):
    options = {"merge-engine": "aggregation", "sequence.field": "ts", "fields.s.aggregate-function": "sum",
               "fields.lv.aggregate-function": "last_value"}
    check(data, options, {"s": pa.int64(), "lv": pa.int64(), "ts": pa.int32()}, records, contiguous=False)


NESTED = {"c": pa.list_(pa.int32()), "cd": pa.list_(pa.string()), "m": pa.map_(pa.string(), pa.int32())}
LISTS = st.none() | st.lists(st.none() | st.integers(0, 3), max_size=3)


@SETTINGS
@given(st.data(), records_of(INSERTS, c=LISTS, cd=st.none() | st.lists(st.sampled_from(["a", "b"]), max_size=3),
                             m=st.none() | st.dictionaries(st.sampled_from(["a", "b", "c"]), SMALL, max_size=2)))
def test_aggregation_collect_and_merge_map(data, records):
    for r in records:
        r["m"] = list(r["m"].items()) if r["m"] is not None else None
    options = {"merge-engine": "aggregation", "fields.c.aggregate-function": "collect",
               "fields.cd.aggregate-function": "collect", "fields.cd.distinct": "true",
               "fields.m.aggregate-function": "merge_map"}
    check(data, options, NESTED, records)
