"""Polars' lazy scan and DuckDB's registered table answer as ``to_arrow`` does, and the filters
they hand over prune: fewer data files are planned and opened than without them."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest
from stack_tables import sorted_rows

import strata
import strata.polars
from strata import col
from strata.arrow_stream import ArrowScan

# (Polars expression, SQL condition, the same as a Strata filter); NULLs on both sides
CASES = [
    (pl.col("dt") == "2024-01-02", "dt = '2024-01-02'", col("dt") == "2024-01-02"),
    (pl.col("dt").is_null(), "dt IS NULL", col("dt").is_null()),
    ((pl.col("k") >= 40) & pl.col("v").is_not_null(), "k >= 40 AND v IS NOT NULL",
     (col("k") >= 40) & col("v").is_not_null()),
    (pl.col("k").is_null() | (pl.col("id") < 50), "k IS NULL OR id < 50", col("k").is_null() | (col("id") < 50)),
    (pl.col("k").is_in([3, 4]) & (pl.col("dt") != "2024-01-01"), "k IN (3, 4) AND dt <> '2024-01-01'",
     col("k").isin([3, 4]) & (col("dt") != "2024-01-01")),
    # nothing of these has a Strata form: the engine filters alone
    (pl.col("v").str.to_uppercase() == "V3", "upper(v) = 'V3'", col("v") == "v3"),
    ((pl.col("x") > 100.0) & (pl.col("id") > 400), "x > 100.0 AND id > 400", (col("x") > 100.0) & (col("id") > 400)),
]
IDS = ["partition", "partition-null", "data-and-null", "or-with-null", "in-and-not", "function", "float"]


@pytest.mark.parametrize(("expr", "sql", "predicate"), CASES, ids=IDS)
def test_polars_lazy_scan_answers_as_to_arrow(table: strata.Table, expr: pl.Expr, sql: str,
                                              predicate: strata.Predicate) -> None:
    expected = sorted_rows(table.to_arrow(columns=["id", "k", "v"], filter=predicate))
    lazy = table.to_polars(lazy=True).filter(expr).select("id", "k", "v")
    got = lazy.collect().sort("id").to_arrow().cast(expected.schema)
    assert got.equals(expected)


@pytest.mark.parametrize(("expr", "sql", "predicate"), CASES, ids=IDS)
def test_duckdb_answers_as_to_arrow(table: strata.Table, expr: pl.Expr, sql: str, predicate: strata.Predicate) -> None:
    expected = sorted_rows(table.to_arrow(columns=["id", "k", "v"], filter=predicate))
    con = table.to_duckdb(name="t")
    got = con.sql(f"SELECT id, k, v FROM t WHERE {sql} ORDER BY id").to_arrow_table()
    assert got.cast(expected.schema).equals(expected)


def test_polars_pushes_the_row_limit_and_projection(table: strata.Table, files_opened: list[str]) -> None:
    head = table.to_polars(lazy=True).select("id", "v").head(7).collect()
    opened = len(files_opened)
    assert head.columns == ["id", "v"] and head.height == 7
    assert set(head["id"].to_list()) <= set(table.to_arrow(columns=["id"]).column("id").to_pylist())
    assert opened < sum(len(s.files) for s in ArrowScan(table).plan().splits)


def test_polars_and_duckdb_prune_files_by_a_data_filter(table: strata.Table, files_opened: list[str]) -> None:
    """ids grow with each commit: `id < 100` lives in the first commit's files only."""
    all_files = sum(len(s.files) for s in ArrowScan(table).plan().splits)
    table.to_polars(lazy=True).filter(pl.col("id") < 100).collect()
    by_polars = len(files_opened)
    files_opened.clear()
    table.to_duckdb(name="t", native=False).sql("SELECT * FROM t WHERE id < 100").fetchall()
    by_duckdb = len(files_opened)
    assert 0 < by_polars < all_files and 0 < by_duckdb < all_files


def test_polars_and_duckdb_prune_partitions(table: strata.Table, files_opened: list[str]) -> None:
    if not table.schema.partition_keys:
        pytest.skip("an unpartitioned table has no partition to prune")
    table.to_polars(lazy=True).filter(pl.col("dt") == "2024-01-02").collect()
    opened = set(files_opened)
    files_opened.clear()
    table.to_duckdb(name="t", native=False).sql("SELECT count(*) FROM t WHERE dt = '2024-01-02'").fetchall()
    assert opened and all("dt=2024-01-02" in p for p in opened)
    assert files_opened and all("dt=2024-01-02" in p for p in files_opened)


def test_time_travel_and_tags(table: strata.Table) -> None:
    first = table.snapshot_manager.latest_id()
    assert first is not None
    table.create_tag("before")
    table.write(pa.table({"id": [10**9], "dt": ["2024-01-01"], "k": pa.array([1], pa.int32()),
                          "v": ["late"], "x": [0.0]}))
    expected = table.to_arrow(snapshot_id=first).num_rows
    assert strata.polars.scan(table, snapshot_id=first).select(pl.len()).collect().item() == expected
    assert strata.polars.scan(table, tag="before").select(pl.len()).collect().item() == expected
    con = table.to_duckdb(name="old", tag="before")
    assert con.sql("SELECT count(*) FROM old").fetchall() == [(expected,)]
    assert table.to_duckdb(name="now").sql("SELECT count(*) FROM now").fetchall() == [(expected + 1,)]


def test_polars_scan_of_a_branch(table: strata.Table) -> None:
    branch = table.create_branch("b", from_snapshot=table.snapshot_manager.latest_id())
    branch.write(pa.table({"id": [10**9], "dt": ["2024-01-01"], "k": pa.array([1], pa.int32()),
                           "v": ["on-branch"], "x": [0.0]}))
    on_branch = strata.polars.scan(table, branch="b").filter(pl.col("v") == "on-branch").collect()
    assert on_branch["id"].to_list() == [10**9]
    assert strata.polars.scan(table).filter(pl.col("v") == "on-branch").collect().height == 0
