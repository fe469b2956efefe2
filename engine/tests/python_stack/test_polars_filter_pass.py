"""Polars' predicate is evaluated once: when it translates whole into Strata's filter (which
Strata's read applies to every row), the rows read are not filtered again by Polars; when a part
has no Strata form, the whole predicate is applied to the rows read. The answer is always the one
Polars gives over ``to_arrow``'s rows, NULLs included."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl
import pytest
from stack_tables import make_table

import strata
import strata.polars


@pytest.fixture
def second_filters(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[pl.Expr]]:
    """The predicates the scan applies with Polars to the frames Strata read."""
    applied: list[pl.Expr] = []
    real = pl.DataFrame.filter

    def counted(self: pl.DataFrame, *predicates: pl.Expr, **constraints: object) -> pl.DataFrame:
        applied.extend(predicates)
        return real(self, *predicates, **constraints)

    monkeypatch.setattr(pl.DataFrame, "filter", counted)
    yield applied


def polars_over_to_arrow(table: strata.Table, predicate: pl.Expr, columns: list[str]) -> pl.DataFrame:
    frame = pl.from_arrow(table.to_arrow())
    assert isinstance(frame, pl.DataFrame)
    return frame.filter(predicate).select(columns).sort("id")


WHOLE = [
    (pl.col("k") >= 40) & pl.col("v").is_not_null() & (pl.col("dt") != "2024-01-01"),
    ~((pl.col("k") > 40) | (pl.col("v") == "v3")),  # NULLs: a negated unknown stays unknown
    pl.col("k").is_null() | (pl.col("id") < 50),
    ~pl.col("k").is_in([3, 4]),  # a NULL k: is_in is NULL, so is its negation
    ~pl.col("k").is_in([3, 4], nulls_equal=True),  # a NULL k: is_in is false, its negation true
]


@pytest.mark.parametrize("kind", ["append_partitioned", "pk"])
@pytest.mark.parametrize("predicate", WHOLE, ids=["and", "not-or-nulls", "or-null", "not-in", "not-in-nulls-equal"])
def test_a_predicate_strata_takes_whole_is_applied_once(catalog: strata.Catalog, kind: str, predicate: pl.Expr,
                                                        second_filters: list[pl.Expr]) -> None:
    table = make_table(catalog, kind)
    expected = polars_over_to_arrow(table, predicate, ["id", "k", "v"])
    second_filters.clear()
    got = strata.polars.scan(table).filter(predicate).select("id", "k", "v").collect().sort("id")
    assert got.equals(expected)
    assert second_filters == []
    limited = strata.polars.scan(table).filter(predicate).select("id").head(5).collect()
    assert limited.height == min(5, expected.height) and set(limited["id"]) <= set(expected["id"])


@pytest.mark.parametrize("kind", ["append_partitioned", "pk"])
def test_a_predicate_strata_takes_in_part_is_applied_whole_to_the_rows_read(
        catalog: strata.Catalog, kind: str, second_filters: list[pl.Expr],
        native_reads: list[tuple[list[str], object]]) -> None:
    table = make_table(catalog, kind)
    # a float comparison has no Strata form (NaN orders otherwise there)
    predicate = (pl.col("k") >= 40) & (pl.col("x") < 1000.0)
    expected = polars_over_to_arrow(table, predicate, ["id", "k", "v"])
    assert 0 < expected.height < polars_over_to_arrow(table, pl.col("k") >= 40, ["id"]).height
    second_filters.clear()
    got = strata.polars.scan(table).filter(predicate).select("id", "k", "v").collect().sort("id")
    assert got.equals(expected)
    # Polars' optimized form of the predicate, on every frame Strata read, or in the scan of the
    # files handed to Polars' own reader
    assert second_filters or [p for _, p in native_reads if p is not None]
