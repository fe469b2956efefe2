"""Filters on a column that comes after a ROW, ARRAY, MAP or MULTISET column: a nested column is
several Parquet columns (leaves), so row-group statistics of a later column are not at its
top-level position. Reads must find every matching row, on append and primary-key tables and in
files other writers made (Parquet's leaf order, without Arrow's schema in the footer)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import strata
from strata import col
from strata.expressions.literals import bind
from strata.fs.file_io import LocalFileIO
from strata.io import data_file_writer
from strata.io.data_file_reader import ColumnMapping, read_file
from strata.io.leaves import primitive_leaves
from strata.schema.table_schema import TableSchema, schema_from_arrow
from strata.schema.types import DataType

ROWS = 24
GROUP_ROWS = 4  # several row groups per file, so that row-group pruning runs

# the nested column before the filtered one, its values (all far from the filtered column's 0..23)
NESTED: dict[str, tuple[pa.DataType, object]] = {
    "row": (pa.struct([("a", pa.int64()), ("b", pa.int64())]), lambda i: {"a": 1000 + i, "b": 2000 + i}),
    "array of rows": (pa.list_(pa.struct([("a", pa.int64()), ("b", pa.int64())])),
                      lambda i: [{"a": 1000 + i, "b": 2000 + i}]),
    "map": (pa.map_(pa.string(), pa.int64()), lambda i: [(f"k{i}", 3000 + i)]),
    "multiset": (pa.map_(pa.int64(), pa.int32(), keys_sorted=False), lambda i: [(4000 + i, 1)]),
    "nested row": (pa.struct([("a", pa.int64()), ("inner", pa.struct([("b", pa.int64()),
                                                                       ("c", pa.list_(pa.int64()))]))]),
                   lambda i: {"a": 1000 + i, "inner": {"b": 2000 + i, "c": [5000 + i]}}),
}


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch):
    monkeypatch.setattr(data_file_writer, "ROW_GROUP_ROWS", GROUP_ROWS)
    monkeypatch.setattr(data_file_writer, "ROW_GROUP_BYTES", 0)  # groups of GROUP_ROWS rows exactly


@pytest.fixture
def catalog(tmp_path):
    c = strata.load_catalog(str(tmp_path / "wh"))
    c.create_database("db")
    return c


def _rows(kind: str) -> pa.Table:
    nested_type, value = NESTED[kind]
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("n", nested_type),
                        pa.field("v", pa.int64()), pa.field("name", pa.string())])
    ids = list(range(ROWS))
    return pa.table({"k": ids, "n": [value(i) for i in ids], "v": ids,  # type: ignore[operator]
                     "name": [f"name{i:02d}" for i in ids]}, schema=schema)


def _table_schema(kind: str, rows: pa.Table, primary_keys: list[str] | None) -> TableSchema:
    options = {"bucket": "1", "deletion-vectors.enabled": "true"} if primary_keys else {"bucket": "-1"}
    schema = schema_from_arrow(rows.schema, primary_keys=primary_keys, options=options)
    if kind == "multiset":  # a MULTISET<BIGINT> column is a map of element to count in Parquet
        fields = [dataclasses.replace(f, type=DataType.multiset(DataType("BIGINT"))) if f.name == "n" else f
                  for f in schema.fields]
        schema = dataclasses.replace(schema, fields=fields)
    return schema


def test_filter_finds_rows_after_a_struct_column(catalog) -> None:
    """The reported case: `(s ROW<a, b>, id)`, `id == 5`, where leaf 1 is `s.b` (100..109)."""
    schema = pa.schema([("s", pa.struct([("a", pa.int64()), ("b", pa.int64())])), ("id", pa.int64())])
    table = catalog.create_table("db.t", schema)
    table.write(pa.table({"s": [{"a": i, "b": 100 + i} for i in range(10)], "id": list(range(10))},
                         schema=schema))
    assert table.to_arrow(filter=col("id") == 5).to_pylist() == [{"s": {"a": 5, "b": 105}, "id": 5}]


@pytest.mark.parametrize("primary_keys", [None, ["k"]], ids=["append", "primary-key"])
@pytest.mark.parametrize("kind", sorted(NESTED))
def test_filter_on_a_column_after_a_nested_one(catalog, kind, primary_keys) -> None:
    """On a primary-key table a filter on a value column prunes row groups when files are read
    without merging: deletion vectors, once compacted out of level 0."""
    rows = _rows(kind)
    table = catalog.create_table("db.t", _table_schema(kind, rows, primary_keys))
    table.write(rows)
    if primary_keys:
        table.compact(full=True)
    (split,) = table.scan()
    assert (split.deletion_files is not None) == bool(primary_keys)
    (data_file,) = split.files
    assert pq.ParquetFile(f"{table.path}/bucket-0/{data_file.file_name}").num_row_groups == ROWS // GROUP_ROWS
    for predicate in (col("v") == 5, col("v").between(9, 14), col("name") == "name17", col("v") >= 22):
        got = table.to_arrow(["k", "n", "v"], filter=predicate).sort_by("k")
        expected = rows.filter(predicate.to_arrow()).select(["k", "n", "v"])
        assert got.to_pylist() == expected.to_pylist(), predicate


def test_is_null_on_a_nested_column_after_another(catalog) -> None:
    """A nested column has no statistics of its own: the null count of the leaf at its top-level
    position (here `s.b`, never null) says nothing about its nulls."""
    schema = pa.schema([("s", pa.struct([("a", pa.int64()), ("b", pa.int64())])), ("tags", pa.list_(pa.int64())),
                        ("id", pa.int64())])
    table = catalog.create_table("db.t", schema)
    table.write(pa.table({"s": [{"a": i, "b": i} for i in range(8)], "tags": [None if i % 3 else [i] for i in range(8)],
                          "id": list(range(8))}, schema=schema))
    assert sorted(table.to_arrow(["id"], filter=col("tags").is_null()).column("id").to_pylist()) == [1, 2, 4, 5, 7]


def test_a_file_without_arrow_schema_prunes_by_its_parquet_leaves(tmp_path) -> None:
    """A file as Paimon's Java writer or pypaimon makes it: Parquet's schema only, a MAP and a ROW
    first, several row groups. Row groups are pruned by the filtered column's own leaf."""
    rows = _rows("map").append_column("r", _rows("nested row").column("n")).select(["n", "r", "k", "v", "name"])
    path = str(tmp_path / "foreign.parquet")
    pq.write_table(rows, path, row_group_size=GROUP_ROWS, store_schema=False)
    parquet_schema = pq.ParquetFile(path).schema
    assert [parquet_schema.column(i).path for i in primitive_leaves(rows.schema).values()] == ["k", "v", "name"]
    schema = schema_from_arrow(rows.schema)
    mapping = ColumnMapping(schema, schema, ["k", "v"])
    predicate = bind(col("v").between(9, 14), schema)
    got = pa.concat_tables(read_file(LocalFileIO(), path, mapping, predicate))
    # the groups of rows 8..11 and 12..15 only (pruning is by groups; the rows are not filtered)
    assert got.column("k").to_pylist() == list(range(8, 16))
    assert pc.all(pc.equal(got.column("k"), got.column("v"))).as_py()
