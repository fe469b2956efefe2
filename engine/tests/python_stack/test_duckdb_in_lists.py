"""DuckDB's IN lists reach Strata's scan: ``k IN (3, 4)`` (handed over as
``if_else(is_valid(k), is_in(k, ...), null)``) prunes files and partitions, and answers, NOT IN and
NULLs included, are those of DuckDB over the same rows as plain Arrow."""

from __future__ import annotations

import duckdb
import pytest

import strata
from strata.arrow_stream import ArrowScan

CONDITIONS = ["k IN (3, 4)", "k NOT IN (3, 4)", "NOT (k IN (3, 4) OR v = 'v3')", "dt IN ('2024-01-01')",
              "dt NOT IN ('2024-01-01')", "k NOT IN (3, NULL)", "id IN (5, 6, 7000) OR k IN (7)",
              "k IN (3) AND v IS NULL"]


@pytest.mark.parametrize("condition", CONDITIONS)
def test_in_lists_answer_as_duckdb_over_the_rows(table: strata.Table, condition: str) -> None:
    query = f"SELECT id, k, v FROM t WHERE {condition} ORDER BY id"
    plain = duckdb.connect()
    plain.register("t", table.to_arrow())
    expected = plain.sql(query).fetchall()
    assert table.to_duckdb(name="t", native=False).sql(query).fetchall() == expected


def test_an_in_list_prunes_files(table: strata.Table, files_opened: list[str]) -> None:
    """ids grow with each commit: ids 5 and 6 live in the first commit's files only."""
    all_files = sum(len(s.files) for s in ArrowScan(table).plan().splits)
    got = table.to_duckdb(name="t", native=False).sql("SELECT id FROM t WHERE id IN (5, 6) ORDER BY id").fetchall()
    assert got == [(5,), (6,)]
    assert 0 < len(files_opened) < all_files


def test_an_in_list_prunes_partitions(table: strata.Table, files_opened: list[str]) -> None:
    if not table.schema.partition_keys:
        pytest.skip("an unpartitioned table has no partition to prune")
    expected = table.to_arrow(columns=["dt"]).column("dt").to_pylist().count("2024-01-02")
    files_opened.clear()
    count = table.to_duckdb(name="t", native=False).sql("SELECT count(*) FROM t WHERE dt IN ('2024-01-02')").fetchall()
    assert count == [(expected,)]
    assert files_opened and all("dt=2024-01-02" in p for p in files_opened)
