"""A scan as an Arrow stream (the PyCapsule protocol): pyarrow, DuckDB and Polars read the same
rows as ``to_arrow``, a limit stops the read early, and a filter prunes files."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from stack_tables import SCHEMA, sorted_rows

import strata
from strata import col


def test_pyarrow_reads_the_stream_as_to_arrow(table: strata.Table) -> None:
    scan = table.arrow_scan()
    reader = pa.RecordBatchReader.from_stream(scan)
    assert sorted_rows(reader.read_all()).equals(sorted_rows(table.to_arrow()))


def test_the_scan_can_be_consumed_again_at_its_snapshot(table: strata.Table) -> None:
    scan = table.arrow_scan(columns=["id", "k"], filter=col("k").is_null())
    first = pa.RecordBatchReader.from_stream(scan).read_all()
    table.write(pa.table({"id": [10**9], "dt": ["2024-01-01"], "k": pa.array([None], pa.int32()),
                          "v": ["new"], "x": [0.5]}, schema=SCHEMA))
    again = pa.RecordBatchReader.from_stream(scan).read_all()
    assert first.num_rows > 0 and sorted_rows(first).equals(sorted_rows(again))


@pytest.mark.parametrize("predicate", [col("dt") == "2024-01-02", col("dt").is_null() | (col("k") == 5),
                                       (col("k") >= 40) & col("v").is_not_null(), col("id") < 100])
def test_duckdb_and_polars_take_the_stream(table: strata.Table, predicate: strata.Predicate) -> None:
    expected = sorted_rows(table.to_arrow(columns=["id", "dt", "k", "v"], filter=predicate))
    scan = table.arrow_scan(columns=["id", "dt", "k", "v"], filter=predicate)
    through_duckdb = duckdb.connect().sql("SELECT * FROM scan ORDER BY id").to_arrow_table()
    through_polars = pl.DataFrame(scan).sort("id").to_arrow()
    assert expected.num_rows > 0
    assert through_duckdb.equals(expected.cast(through_duckdb.schema))
    assert through_polars.cast(expected.schema).equals(expected)


def test_a_limit_stops_reading_splits(table: strata.Table) -> None:
    everything = table.arrow_scan()
    limited = table.arrow_scan(limit=10)
    read = pa.RecordBatchReader.from_stream(limited).read_all()
    assert read.num_rows == 10
    assert pc_is_subset(read, everything.to_arrow())


def pc_is_subset(part: pa.Table, whole: pa.Table) -> bool:
    return set(part.column("id").to_pylist()) <= set(whole.column("id").to_pylist())


def test_a_partition_filter_prunes_files(table: strata.Table) -> None:
    if not table.schema.partition_keys:
        pytest.skip("an unpartitioned table has no partition to prune")
    whole = table.arrow_scan().plan().stats
    pruned = table.arrow_scan(filter=col("dt") == "2024-01-01").plan().stats
    assert pruned.files_scanned < whole.files_scanned
    assert pruned.files_skipped > 0


def test_a_negative_limit_is_refused(table: strata.Table) -> None:
    with pytest.raises(ValueError, match=r"row limit .* must be >= 0"):
        table.arrow_scan(limit=-1)
