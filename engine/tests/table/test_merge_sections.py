"""Merged reads by key section: only files whose key ranges overlap merge with each other."""

from __future__ import annotations

import pyarrow as pa

import strata
from strata.table.read import TableRead

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _table(warehouse: str, **options: str) -> strata.Table:
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    return catalog.create_table("db.t", SCHEMA, primary_keys=["k"],
                                options={"bucket": "1", "write-only": "true", **options})


def _rows(keys: range, tag: str) -> pa.Table:
    return pa.table({"k": pa.array(list(keys), pa.int64()), "v": [f"{tag}{k}" for k in keys]}, schema=SCHEMA)


def _sections(table: strata.Table) -> list[list[tuple[int, int]]]:
    """Each section's runs, as the (first, last) key of each run's files, in the plan's order."""
    read = TableRead(table)
    [split] = table.new_scan().plan().splits
    return [[(min(read.key_order(f.min_key)[0] for f in run), max(read.key_order(f.max_key)[0] for f in run))
             for run in section.file_runs] for section in read._merge_plan(split).sections]


def test_files_merge_only_with_the_files_their_key_ranges_overlap(tmp_path):
    table = _table(str(tmp_path))
    table.write(_rows(range(0, 10), "a"))
    table.write(_rows(range(30, 40), "b"))
    table.write(_rows(range(10, 20), "c"))
    table.write(_rows(range(15, 25), "d"))  # overlaps the third file only
    table.delete(_rows(range(33, 34), ""))
    table.delete(_rows(range(50, 52), ""))  # keys never written: a section of deletes alone
    assert _sections(table) == [[(0, 9)], [(10, 19), (15, 24)], [(30, 39), (33, 33)], [(50, 51)]]
    read = TableRead(table)
    [split] = table.new_scan().plan().splits
    assert [s.merging for s in read._merge_plan(split).sections] == [False, True, True, False]
    got = dict(zip(*table.to_arrow().sort_by("k").to_pydict().values(), strict=True))
    want = {**{k: f"a{k}" for k in range(10)}, **{k: f"c{k}" for k in range(10, 15)},
            **{k: f"d{k}" for k in range(15, 25)}, **{k: f"b{k}" for k in range(30, 40) if k != 33}}
    assert got == want
    assert table.to_arrow(filter=strata.col("k").between(12, 31)).num_rows == 15


def test_a_file_touching_a_section_at_one_key_joins_it(tmp_path):
    """Ranges that share only their end key still overlap: both files hold that key."""
    table = _table(str(tmp_path))
    table.write(_rows(range(0, 10), "a"))
    table.write(_rows(range(9, 12), "b"))
    table.write(_rows(range(12, 14), "c"))
    assert _sections(table) == [[(0, 9), (9, 11)], [(12, 13)]]
    assert table.to_arrow(filter=strata.col("k") == 9).column("v").to_pylist() == ["b9"]


def test_composite_keys_section_by_the_whole_key(tmp_path):
    catalog = strata.load_catalog(str(tmp_path))
    catalog.create_database("db")
    schema = pa.schema([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.string(), nullable=False),
                        pa.field("v", pa.int64())])
    table = catalog.create_table("db.t", schema, primary_keys=["a", "b"], options={"bucket": "1"})
    table.write(pa.table({"a": pa.array([1, 1], pa.int32()), "b": ["x", "y"], "v": [1, 2]}, schema=schema))
    table.write(pa.table({"a": pa.array([1, 2], pa.int32()), "b": ["z", "a"], "v": [3, 4]}, schema=schema))
    table.write(pa.table({"a": pa.array([1], pa.int32()), "b": ["y"], "v": [5]}, schema=schema))
    read = TableRead(table)
    [split] = table.new_scan().plan().splits
    assert [sum(len(run) for run in s.file_runs) for s in read._merge_plan(split).sections] == [2, 1]
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: (r["a"], r["b"])) == [
        {"a": 1, "b": "x", "v": 1}, {"a": 1, "b": "y", "v": 5}, {"a": 1, "b": "z", "v": 3},
        {"a": 2, "b": "a", "v": 4}]
