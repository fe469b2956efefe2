"""DuckDB's filter is applied once: when Strata's scan takes every conjunct of it (Strata's read
filters each row), the rows are not filtered a second time by pyarrow; when a conjunct it hands
over has no Strata form, the whole filter is applied to the rows read, and the answer is to_arrow's."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pyarrow.dataset as ds
import pytest
from stack_tables import make_table, sorted_rows

import strata
import strata.duckdb
from strata import col

pytest.importorskip("duckdb")


@pytest.fixture
def second_filters(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The filters the scanners DuckDB gets apply to the rows Strata read (None: none)."""
    seen: list[Any] = []

    def from_batches(batches: Any, **kwargs: Any) -> ds.Scanner:
        seen.append(kwargs.get("filter"))
        return ds.Scanner.from_batches(batches, **kwargs)

    scanner = SimpleNamespace(from_batches=from_batches)
    monkeypatch.setattr(strata.duckdb, "ds", SimpleNamespace(**{**vars(ds), "Scanner": scanner}))
    yield seen


@pytest.mark.parametrize("kind", ["append_partitioned", "pk"])
def test_a_filter_strata_takes_whole_is_applied_once(catalog: strata.Catalog, kind: str,
                                                     second_filters: list[Any]) -> None:
    table = make_table(catalog, kind)
    predicate = (col("k") >= 40) & col("v").is_not_null() & (col("dt") != "2024-01-01")
    expected = sorted_rows(table.to_arrow(columns=["id", "k", "v"], filter=predicate))
    got = table.to_duckdb(name="t", native=False).sql(
        "SELECT id, k, v FROM t WHERE k >= 40 AND v IS NOT NULL AND dt <> '2024-01-01' ORDER BY id").to_arrow_table()
    assert expected.num_rows > 0 and got.cast(expected.schema).equals(expected)
    assert second_filters == [None]


@pytest.mark.parametrize("kind", ["append_partitioned", "pk"])
def test_a_filter_strata_takes_in_part_is_applied_whole_to_the_rows_read(catalog: strata.Catalog, kind: str,
                                                                         second_filters: list[Any]) -> None:
    table = make_table(catalog, kind)
    # DuckDB hands over both; a float comparison has no Strata form (NaN orders otherwise there)
    expected = sorted_rows(table.to_arrow(columns=["id", "k", "v"], filter=(col("k") >= 40) & (col("x") < 1000.0)))
    got = table.to_duckdb(name="t", native=False).sql(
        "SELECT id, k, v FROM t WHERE k >= 40 AND x < 1000.0 ORDER BY id").to_arrow_table()
    everything = table.to_arrow(columns=["id"], filter=col("k") >= 40)
    assert 0 < expected.num_rows < everything.num_rows  # the float conjunct drops rows
    assert expected.num_rows > 0 and got.cast(expected.schema).equals(expected)
    assert len(second_filters) == 1 and second_filters[0] is not None
