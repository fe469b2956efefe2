"""Files written under old schemas read correctly under the new one: renamed columns keep their
values, dropped ones are gone, added ones are null for old rows, widened ones are cast. Primary-key
tables merge records of one key across files of different schema ids; filters and projections on
renamed, added and widened columns give the model's rows, and stats pruning maps columns through
field ids (a file's stats are never read under another column's name)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata import SchemaChange, col
from strata.expressions import Predicate

V0 = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("a", pa.int32()), ("b", pa.string()),
                ("c", pa.float32()), ("d", pa.decimal128(10, 2)), ("e", pa.string())])


def _v0_rows(ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "dt": f"p{i % 3}", "a": i * 10, "b": f"b{i}", "c": i + 0.5,
             "d": Decimal(i) + Decimal("0.25"), "e": None if i % 4 == 0 else f"e{i}"} for i in ids]


def _evolve(table: strata.Table) -> strata.Table:
    """v1: rename b -> name, add n1 INT after a, widen a -> BIGINT, c -> DOUBLE
    v2: drop e, widen d -> DECIMAL(14, 3), add e (a new column that reuses the dropped name), add x first"""
    t = table.alter(SchemaChange.rename_column("b", "name"), SchemaChange.add_column("n1", "INT", after="a"),
                    SchemaChange.update_column_type("a", "BIGINT"), SchemaChange.update_column_type("c", "DOUBLE"))
    assert t.schema.id == 1
    return t


def _evolve2(table: strata.Table) -> strata.Table:
    t = table.alter(SchemaChange.drop_column("e"), SchemaChange.update_column_type("d", "DECIMAL(14, 3)"),
                    SchemaChange.add_column("e", "STRING"), SchemaChange.add_column("x", "BIGINT", first=True))
    assert t.schema.id == 2
    return t


def _to_v1(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    out["name"] = out.pop("b")
    out["n1"] = None
    return out


def _to_v2(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    out["e"] = None  # the old e is gone; the new e has no values in old files
    out["x"] = None
    return out


def _v1_rows(ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "dt": f"p{i % 3}", "a": 2**40 + i, "n1": i, "name": f"name{i}", "c": i + 0.25,
             "d": Decimal(i) + Decimal("0.5"), "e": f"e1-{i}"} for i in ids]


def _v2_rows(ids: range) -> list[dict[str, Any]]:
    return [{"x": i * 7, "id": i, "dt": f"p{i % 3}", "a": -i, "n1": None if i % 2 else i, "name": f"v2-{i}",
             "c": None, "d": Decimal(i) + Decimal("0.125"), "e": f"new-e{i}"} for i in ids]


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)


def _apply(model: dict[int, dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    for r in rows:
        model[r["id"]] = r


def _check(table: strata.Table, expected: list[dict[str, Any]], columns: list[str] | None = None,
           filter: Predicate | None = None) -> None:
    data = table.to_arrow(columns=columns, filter=filter)
    names = columns or table.schema.field_names
    assert data.column_names == names
    assert data.schema == pa.schema([table.schema.field(n).to_arrow() for n in names])
    got = sorted(data.to_pylist(), key=lambda r: tuple((v is None, str(v)) for v in r.values()))
    want = sorted(({n: r[n] for n in names} for r in expected),
                  key=lambda r: tuple((v is None, str(v)) for v in r.values()))
    assert got == want


def _cases(rows: list[dict[str, Any]]) -> list[tuple[list[str] | None, Predicate | None, list[dict[str, Any]]]]:
    """(projection, filter, expected rows) on renamed, added, widened and re-added columns."""
    return [
        (None, None, rows),
        (["name", "id"], None, rows),
        (None, col("name") == "b4", [r for r in rows if r["name"] == "b4"]),
        (["id"], col("name").startswith("name"), [r for r in rows if r["name"].startswith("name")]),
        (None, col("n1").is_null(), [r for r in rows if r["n1"] is None]),
        (["id", "n1"], col("n1") >= 3, [r for r in rows if r["n1"] is not None and r["n1"] >= 3]),
        (None, col("a") > 2**40, [r for r in rows if r["a"] > 2**40]),
        (["a"], col("a") < 0, [r for r in rows if r["a"] < 0]),
        (None, col("c") > 5.0, [r for r in rows if r["c"] is not None and r["c"] > 5.0]),
        (None, col("d") >= Decimal("10.2"), [r for r in rows if r["d"] >= Decimal("10.2")]),
        (None, col("e").is_null(), [r for r in rows if r["e"] is None]),
        (None, col("e").is_not_null(), [r for r in rows if r["e"] is not None]),
        (None, col("x") == 14, [r for r in rows if r["x"] == 14]),
        (None, (col("dt") == "p1") & (col("name") != "zzz"), [r for r in rows if r["dt"] == "p1"]),
    ]


def _run_cases(table: strata.Table, model_rows: list[dict[str, Any]]) -> None:
    for columns, filter, expected in _cases(model_rows):
        _check(table, expected, columns, filter)


@pytest.mark.parametrize("bucket", ["1", "3"])
def test_pk_table_across_schema_versions(catalog: strata.Catalog, bucket: str) -> None:
    table = catalog.create_table("db.t", V0, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": bucket})
    model: dict[int, dict[str, Any]] = {}
    rows0 = _v0_rows(range(0, 20))
    table.write(_table(rows0, V0))
    _apply(model, rows0)
    table.write(_table(_v0_rows(range(15, 18)), V0))  # a second v0 file with the same keys

    t1 = _evolve(table)
    model = {k: _to_v1(v) for k, v in model.items()}
    rows1 = _v1_rows(range(10, 25))  # keys 10..19 exist in v0 files: merged across schema ids
    t1.write(_table(rows1, t1.schema.arrow_schema()))
    _apply(model, rows1)
    t1.delete(_table([model[3], model[12]], t1.schema.arrow_schema()))
    del model[3], model[12]

    t2 = _evolve2(t1)
    model = {k: _to_v2(v) for k, v in model.items()}
    rows2 = _v2_rows(range(18, 30))
    t2.write(_table(rows2, t2.schema.arrow_schema()))
    _apply(model, rows2)
    t2.delete(_table([model[0]], t2.schema.arrow_schema()))
    del model[0]

    reader = catalog.get_table("db.t")
    assert reader.schema.id == 2
    files = [f for s in reader.scan() for f in s.files]
    assert {f.schema_id for f in files} == {0, 1, 2}
    _run_cases(reader, list(model.values()))

    # a full compaction merges everything into the top level (a lone file may just be moved up,
    # keeping its schema id, as Paimon's upgrade does): same rows
    reader.compact(full=True)
    compacted = catalog.get_table("db.t")
    assert {f.level for s in compacted.scan() for f in s.files} == {compacted.core.num_levels - 1}
    _run_cases(compacted, list(model.values()))
    assert compacted.to_arrow(read_optimized=True).num_rows == len(model)


def test_pk_table_compaction_during_writes(catalog: strata.Catalog) -> None:
    """Writers of the new schema compact old-schema files (level merges) as they go."""
    table = catalog.create_table("db.t", V0, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "1", "num-sorted-run.compaction-trigger": "2"})
    model: dict[int, dict[str, Any]] = {}
    for start in (0, 5, 10):
        rows = _v0_rows(range(start, start + 8))
        table.write(_table(rows, V0))
        _apply(model, rows)
    t1 = _evolve(table)
    model = {k: _to_v1(v) for k, v in model.items()}
    for start in (3, 9):
        rows = _v1_rows(range(start, start + 5))
        t1.write(_table(rows, t1.schema.arrow_schema()))
        _apply(model, rows)
    reader = catalog.get_table("db.t")
    data = reader.to_arrow()
    assert sorted(data.to_pylist(), key=lambda r: r["id"]) == sorted(
        ({n: r[n] for n in reader.schema.field_names} for r in model.values()), key=lambda r: r["id"])


def test_append_table_across_schema_versions(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.t", V0, partition_keys=["dt"])
    rows: list[dict[str, Any]] = []
    rows0 = _v0_rows(range(0, 20))
    table.write(_table(rows0, V0))
    rows += rows0
    t1 = _evolve(table)
    rows = [_to_v1(r) for r in rows]
    rows1 = _v1_rows(range(20, 30))
    t1.write(_table(rows1, t1.schema.arrow_schema()))
    rows += rows1
    t2 = _evolve2(t1)
    rows = [_to_v2(r) for r in rows]
    rows2 = _v2_rows(range(30, 40))
    t2.write(_table(rows2, t2.schema.arrow_schema()))
    rows += rows2

    reader = catalog.get_table("db.t")
    _run_cases(reader, rows)
    reader.compact(full=True)
    compacted = catalog.get_table("db.t")
    assert {f.schema_id for s in compacted.scan() for f in s.files} == {2}
    _run_cases(compacted, rows)


def test_bucketed_append_table_filters_on_renamed_bucket_key(catalog: strata.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.int32())])
    table = catalog.create_table("db.q", schema, options={"bucket": "4", "bucket-key": "k"})
    table.write(pa.table({"k": pa.array(range(40), pa.int64()), "v": pa.array(range(40), pa.int32())}))
    t = table.alter(SchemaChange.rename_column("k", "key"), SchemaChange.update_column_type("v", "BIGINT"))
    t.write(pa.table({"key": pa.array(range(40, 50), pa.int64()), "v": pa.array(range(40, 50), pa.int64())}))
    for k in (3, 17, 45):
        assert t.to_arrow(filter=col("key") == k).to_pylist() == [{"key": k, "v": k}]


# -- stats pruning through field ids ----------------------------------------------------------------------


def _append_with_reused_name(catalog: strata.Catalog) -> strata.Table:
    """File 1 (schema 0) has a = 0..9. Then a -> old_a, and a new column `a` is added: file 1
    holds no values of the new a (all null), file 2 (schema 1) has a = 100..109."""
    schema = pa.schema([("id", pa.int64()), ("a", pa.int64())])
    table = catalog.create_table("db.p", schema)
    table.write(pa.table({"id": pa.array(range(10), pa.int64()), "a": pa.array(range(10), pa.int64())}))
    t = table.alter(SchemaChange.rename_column("a", "old_a"), SchemaChange.add_column("a", "BIGINT"))
    t.write(pa.table({"id": pa.array(range(10, 20), pa.int64()), "old_a": pa.array([None] * 10, pa.int64()),
                      "a": pa.array(range(100, 110), pa.int64())}))
    return catalog.get_table("db.p")


def test_pruning_uses_field_ids_not_names(catalog: strata.Catalog) -> None:
    t = _append_with_reused_name(catalog)
    # the new `a` is null in file 1: its stats must not be file 1's old `a` (null count 0)
    assert sorted(t.to_arrow(columns=["id"], filter=col("a").is_null()).column("id").to_pylist()) == list(range(10))
    assert sorted(t.to_arrow(columns=["id"], filter=col("a") == 5).column("id").to_pylist()) == []
    assert t.to_arrow(columns=["id"], filter=col("a") == 105).column("id").to_pylist() == [15]
    assert t.to_arrow(columns=["id"], filter=col("old_a") == 5).column("id").to_pylist() == [5]
    assert sorted(t.to_arrow(columns=["id"], filter=col("old_a").is_null()).column("id").to_pylist()) == \
        list(range(10, 20))


def test_pruning_skips_files_by_evolved_stats(catalog: strata.Catalog) -> None:
    t = _append_with_reused_name(catalog)
    # old_a == 5: file 2 is all null for old_a -> skipped; file 1's stats are found under the new name
    plan = t.new_scan(filter=col("old_a") == 5).plan()
    assert [f.schema_id for s in plan.splits for f in s.files] == [0]
    assert plan.stats.files_skipped == 1
    # a == 5: file 1 has no new `a` (all null) and file 2 ranges 100..109 -> both skipped
    plan = t.new_scan(filter=col("a") == 5).plan()
    assert plan.splits == [] and plan.stats.files_skipped == 2
    # a IS NULL keeps file 1 only
    plan = t.new_scan(filter=col("a").is_null()).plan()
    assert [f.schema_id for s in plan.splits for f in s.files] == [0]


def test_row_group_pruning_uses_field_ids(catalog: strata.Catalog) -> None:
    """Same at the Parquet row-group level (several row groups per file)."""
    from strata.io.data_file_reader import ColumnMapping, read_file

    t = _append_with_reused_name(catalog)
    split = t.scan()[0]
    old_file = next(f for f in split.files if f.schema_id == 0)
    mapping = ColumnMapping(t.schema, t.schema_at(0), ["id", "a", "old_a"])
    path = f"{split.bucket_path}/{old_file.file_name}"
    assert sum(b.num_rows for b in read_file(t.file_io, path, mapping, col("a").is_null())) == 10
    mapping = ColumnMapping(t.schema, t.schema_at(0), ["id", "a", "old_a"])
    assert sum(b.num_rows for b in read_file(t.file_io, path, mapping, col("a") == 3)) == 0
    mapping = ColumnMapping(t.schema, t.schema_at(0), ["id", "a", "old_a"])
    assert sum(b.num_rows for b in read_file(t.file_io, path, mapping, col("old_a") == 3)) == 10


def test_widened_column_filters_and_stats(catalog: strata.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.int32()), ("f", pa.float32()), ("s", pa.string())])
    t = catalog.create_table("db.w", schema, primary_keys=["id"], options={"bucket": "2"})
    t.write(pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array(range(10), pa.int32()),
                      "f": pa.array([i / 4 for i in range(10)], pa.float32()), "s": [f"s{i}" for i in range(10)]}))
    t = t.alter(SchemaChange.update_column_type("v", "BIGINT"), SchemaChange.update_column_type("f", "DOUBLE"),
                SchemaChange.update_column_type("s", "STRING"))
    t.write(pa.table({"id": pa.array([100], pa.int64()), "v": pa.array([2**50], pa.int64()),
                      "f": pa.array([1e300]), "s": ["big"]}))
    assert t.to_arrow(columns=["id"], filter=col("v") > 2**40).column("id").to_pylist() == [100]
    assert sorted(t.to_arrow(columns=["id"], filter=col("v") < 3).column("id").to_pylist()) == [0, 1, 2]
    assert t.to_arrow(columns=["f"], filter=col("id") == 2).column("f").to_pylist() == [0.5]
    assert t.to_arrow(columns=["id"], filter=col("f") > 1e200).column("id").to_pylist() == [100]


def test_more_widenings_read_and_filter(catalog: strata.Catalog) -> None:
    import datetime as dt
    from dataclasses import replace

    from strata.schema.table_schema import schema_from_arrow
    from strata.schema.types import DataType

    arrow = pa.schema([("id", pa.int64()), ("t", pa.int8()), ("ts", pa.timestamp("ms")), ("s", pa.string()),
                       ("bin", pa.binary())])
    base = schema_from_arrow(arrow, primary_keys=["id"], options={"bucket": "1"})
    types = {"ts": "TIMESTAMP(3)", "s": "VARCHAR(5)", "bin": "VARBINARY(4)"}
    fields = [replace(f, type=DataType.parse(types[f.name])) if f.name in types else f for f in base.fields]
    t = catalog.create_table("db.more", replace(base, fields=fields))
    t0 = dt.datetime(2024, 1, 1, 12, 0, 0, 123000)
    t.write(pa.table({"id": pa.array([1, 2], pa.int64()), "t": pa.array([-5, 7], pa.int8()),
                      "ts": pa.array([t0, t0 + dt.timedelta(days=1)], pa.timestamp("ms")), "s": ["abc", "de"],
                      "bin": [b"\x01\x02", b"\x03"]}))
    t = t.alter(SchemaChange.update_column_type("t", "BIGINT"), SchemaChange.update_column_type("ts", "TIMESTAMP(6)"),
                SchemaChange.update_column_type("s", "STRING"), SchemaChange.update_column_type("bin", "BYTES"))
    t.write(pa.table({"id": pa.array([3], pa.int64()), "t": pa.array([2**40]), "ts": pa.array(
        [t0 + dt.timedelta(microseconds=7)], pa.timestamp("us")), "s": ["a much longer string"], "bin": [b"\xff" * 9]}))
    data = t.to_arrow().sort_by("id")
    assert data.schema.field("t").type == pa.int64() and data.schema.field("ts").type == pa.timestamp("us")
    assert data.column("t").to_pylist() == [-5, 7, 2**40]
    assert data.column("ts").to_pylist() == [t0, t0 + dt.timedelta(days=1), t0 + dt.timedelta(microseconds=7)]
    assert data.column("s").to_pylist() == ["abc", "de", "a much longer string"]
    assert data.column("bin").to_pylist() == [b"\x01\x02", b"\x03", b"\xff" * 9]
    assert t.to_arrow(columns=["id"], filter=col("t") < 0).column("id").to_pylist() == [1]
    assert sorted(t.to_arrow(columns=["id"], filter=col("ts") > t0).column("id").to_pylist()) == [2, 3]
    assert t.to_arrow(columns=["id"], filter=col("s") == "de").column("id").to_pylist() == [2]


def test_reading_only_a_column_added_later(catalog: strata.Catalog) -> None:
    """A file written before a column was added has none of the columns a read of that column
    wants: its rows read as nulls (the file still gives the row count)."""
    schema = pa.schema([pa.field("id", pa.int64())])
    table = catalog.create_table("db.t", schema)
    table.write(pa.table({"id": [1, 2, 3]}, schema=schema))
    table = table.alter(SchemaChange.add_column("z", "STRING"))
    table.write(pa.table({"id": [4], "z": ["x"]}, schema=table.schema.arrow_schema()))
    assert sorted(table.to_arrow(columns=["z"]).column("z").to_pylist(), key=str) == [None, None, None, "x"]
    assert table.to_arrow(columns=["z"], filter=col("z").is_null()).num_rows == 3
