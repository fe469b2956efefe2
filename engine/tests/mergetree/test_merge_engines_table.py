"""Merge engines end to end through the table API: several commits, several level-0 runs per
commit (tiny write buffers), compaction, projections and option validation."""

import pyarrow as pa
import pytest

from strata.errors import OptionError, StrataError
from strata.mergetree.merge_function import MergeError

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("ts", pa.int64())])


def data(ids, v=None, s=None, ts=None, schema=SCHEMA):
    n = len(ids)
    return pa.table({"id": ids, "v": v if v is not None else [None] * n, "s": s if s is not None else [None] * n,
                     "ts": ts if ts is not None else [None] * n}, schema=schema)


def read(table, **kw):
    out = table.to_arrow(**kw).to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if k != "id"} for r in out}


def write_in_runs(table, batches, kinds=None):
    """One commit whose batches each become a level-0 run (the write buffer is tiny)."""
    writer = table.new_write()
    for i, batch in enumerate(batches):
        writer.write_arrow(batch, row_kind=kinds[i] if kinds else None)
    table.new_commit().commit(writer.prepare_commit())
    writer.close()


def runs_per_bucket(table):
    return max(len([f for f in split.files if f.level == 0]) for split in table.scan())


# flushed when full (not spilled): many runs for the read to merge
OPTS = {"bucket": "2", "write-buffer-size": "1 kb", "write-only": "true", "write-buffer-spillable": "false"}


def test_aggregation_sum_across_commits_and_runs(catalog):
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={
        **OPTS, "merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
        "fields.s.aggregate-function": "listagg", "fields.ts.aggregate-function": "max"})
    expected_v = {}
    batches = []
    for r in range(6):
        ids = list(range(r, r + 40))
        batches.append(data(ids, v=[i * 10 + r for i in ids], s=[f"r{r}"] * 40, ts=[r] * 40))
        for i in ids:
            expected_v[i] = expected_v.get(i, 0) + i * 10 + r
    write_in_runs(t, batches[:3])
    assert runs_per_bucket(t) >= 3
    t.write(batches[3])
    write_in_runs(t, batches[4:])
    got = read(t)
    assert {i: r["v"] for i, r in got.items()} == expected_v
    assert got[5]["s"] == "r0,r1,r2,r3,r4,r5" and got[5]["ts"] == 5
    assert read(t, columns=["id", "v"])[44] == {"v": expected_v[44]}
    t.compact(full=True)
    assert read(t) == got


def test_aggregation_retractions_through_the_table(catalog):
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={
        **OPTS, "merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
        "fields.ts.aggregate-function": "max"})
    t.write(data([1, 2], v=[10, 20], ts=[1, 2]))
    with pytest.raises(MergeError, match=r"fields\.ts\.ignore-retract"):
        t.write(data([1], v=[3], ts=[1]), row_kind="-U")
    t2 = catalog.create_table("db.t2", SCHEMA, primary_keys=["id"], options={
        **OPTS, "merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
        "fields.ts.aggregate-function": "max", "fields.ts.ignore-retract": "true"})
    t2.write(data([1, 2], v=[10, 20], ts=[1, 2]))
    t2.write(data([1], v=[3], ts=[9]), row_kind="-U")
    t2.delete(data([2], v=[5]))
    assert {i: (r["v"], r["ts"]) for i, r in read(t2).items()} == {1: (7, 1), 2: (15, 2)}


def test_partial_update_across_runs(catalog):
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={**OPTS, "merge-engine": "partial-update"})
    write_in_runs(t, [data(list(range(50)), v=list(range(50))),
                      data(list(range(0, 50, 2)), s=["even"] * 25),
                      data(list(range(0, 50, 5)), ts=[5] * 10, v=[None] * 10)])
    t.write(data([1, 2], s=["one", None]))
    got = read(t)
    assert got[0] == {"v": 0, "s": "even", "ts": 5}
    assert got[1] == {"v": 1, "s": "one", "ts": None}
    assert got[2] == {"v": 2, "s": "even", "ts": None}
    with pytest.raises(MergeError, match=r"partial-update\.remove-record-on-delete"):
        t.delete(data([1]))


def test_partial_update_remove_record_on_delete(catalog):
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={
        **OPTS, "merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"})
    t.write(data([1, 2], v=[1, 2], s=["a", "b"]))
    t.delete(data([1]))
    assert read(t) == {2: {"v": 2, "s": "b", "ts": None}}
    t.write(data([1], ts=[7]))
    assert read(t)[1] == {"v": None, "s": None, "ts": 7}


def test_partial_update_sequence_group_and_projection(catalog):
    schema = pa.schema([("id", pa.int64()), ("a", pa.string()), ("g", pa.int64()), ("b", pa.string()),
                        ("h", pa.int64())])
    t = catalog.create_table("db.t", schema, primary_keys=["id"], options={
        **OPTS, "merge-engine": "partial-update", "fields.g.sequence-group": "a",
        "fields.h.sequence-group": "b"})

    def rows(ids, a, g, b, h):
        return pa.table({"id": ids, "a": a, "g": g, "b": b, "h": h}, schema=schema)

    write_in_runs(t, [rows([1, 2], ["a2", "x"], [2, 1], ["b1", "y"], [1, 1]),
                      rows([1], ["a1"], [1], ["b3"], [3])])
    t.write(rows([1, 2], [None, None], [None, 2], ["b2", None], [2, None]))
    assert read(t) == {1: {"a": "a2", "g": 2, "b": "b3", "h": 3}, 2: {"a": None, "g": 2, "b": "y", "h": 1}}
    assert read(t, columns=["id", "b"]) == {1: {"b": "b3"}, 2: {"b": "y"}}  # reads h to merge b


def test_first_row(catalog):
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={**OPTS, "merge-engine": "first-row"})
    write_in_runs(t, [data([1, 2], v=[1, 2]), data([2, 3], v=[20, 30])])
    t.write(data([1, 3, 4], v=[10, 300, 4]))
    assert read(t) == {}, "batch reads of first-row tables skip level 0 (Paimon's batchScanSkipLevel0)"
    t.compact()  # the dedicated compaction job of a write-only table
    assert {i: r["v"] for i, r in read(t).items()} == {1: 1, 2: 2, 3: 30, 4: 4}
    with pytest.raises(MergeError, match="ignore-delete"):
        t.delete(data([1]))
    t2 = catalog.create_table("db.t2", SCHEMA, primary_keys=["id"], options={
        **OPTS, "merge-engine": "first-row", "ignore-delete": "true"})
    t2.write(data([1], v=[1]))
    t2.delete(data([1]))
    t2.write(data([1], v=[2]))
    t2.compact()
    assert {i: r["v"] for i, r in read(t2).items()} == {1: 1}


def test_deduplicate_sequence_field_with_projection_and_compaction(catalog):
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={**OPTS, "sequence.field": "ts"})
    write_in_runs(t, [data([1, 2], v=[1, 1], ts=[10, 10]), data([1, 2], v=[2, 2], ts=[5, 20])])
    t.write(data([1, 2], v=[3, 3], ts=[None, 15]))
    assert read(t, columns=["id", "v"]) == {1: {"v": 1}, 2: {"v": 2}}
    t.compact(full=True)
    assert read(t, columns=["v", "id"]) == {1: {"v": 1}, 2: {"v": 2}}


@pytest.mark.parametrize("options,culprit", [
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "avg"}, "unknown aggregate function"),
    ({"merge-engine": "aggregation", "fields.s.aggregate-function": "sum"}, "'s'"),
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "count"}, "no 'count'"),
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "collect"}, "ARRAY"),
    ({"merge-engine": "aggregation", "fields.s.aggregate-function": "merge_map"}, "MAP"),
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "bool_or"}, "BOOLEAN"),
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "rbm32"}, "not supported"),
    ({"merge-engine": "aggregation", "fields.default-aggregate-function": "listagg"}, "'v'"),
    ({"merge-engine": "aggregation", "fields.nope.aggregate-function": "sum"}, "nope"),
    ({"merge-engine": "aggregation", "sequence.field": "ts", "fields.ts.aggregate-function": "max"}, "ts"),
    ({"merge-engine": "aggregation", "aggregation.remove-record-on-delete": "true",
      "fields.v.ignore-retract": "true"}, "conflict"),
    ({"merge-engine": "first-row", "sequence.field": "ts"}, "sequence.field"),
    ({"sequence.field": "nope"}, "nope"),
    ({"merge-engine": "partial-update", "fields.v.aggregate-function": "sum"}, "sequence group"),
    ({"merge-engine": "partial-update", "fields.s.sequence-group": "v"}, "sequence group needs"),
])
def test_invalid_merge_options_are_refused_at_creation(catalog, options, culprit):
    with pytest.raises(OptionError, match=culprit):
        catalog.create_table("db.bad", SCHEMA, primary_keys=["id"], options={"bucket": "1", **options})
    assert not catalog.table_exists("db.bad")


def test_valid_engine_options_are_accepted(catalog):
    catalog.create_table("db.ok", SCHEMA, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "aggregation", "fields.v.aggregate-function": "product",
        "fields.s.aggregate-function": "listagg", "fields.s.distinct": "true",
        "fields.s.list-agg-delimiter": ";", "fields.ts.aggregate-function": "first_not_null_value",
        "fields.ts.ignore-retract": "true", "aggregation.remove-record-on-delete": "false"})
    catalog.create_table("db.pu", SCHEMA, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "partial-update", "fields.ts.sequence-group": "v,s",
        "fields.v.aggregate-function": "sum", "partial-update.remove-record-on-sequence-group": "ts"})
    assert isinstance(OptionError("x"), StrataError)
