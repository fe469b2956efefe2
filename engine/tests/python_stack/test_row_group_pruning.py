"""Pushdown prunes row groups, not only files: a filter on a data column whose values each row
group holds a range of decodes only the row groups that may match, through the Arrow scan, Polars'
lazy scan and DuckDB alike, counted by the scan's read statistics (``ArrowScan.read_stats``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import strata
import strata.duckdb
import strata.polars
from strata import col
from strata.arrow_stream import ArrowScan
from strata.io import data_file_writer

ROWS = 4 * data_file_writer.ROW_GROUP_ROWS  # four row groups in the file (groups made small below)
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("k", pa.int32())])


@pytest.fixture(params=["append", "pk"])
def table(request: pytest.FixtureRequest, catalog: strata.Catalog, monkeypatch: pytest.MonkeyPatch) -> strata.Table:
    """One data file of ids in order, in row groups of ROW_GROUP_ROWS rows (ranges of ids)."""
    monkeypatch.setattr(data_file_writer, "ROW_GROUP_BYTES", 0)
    keyed = request.param == "pk"
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"] if keyed else None,
                                 options={"bucket": "1" if keyed else "-1"})
    ids = np.arange(ROWS, dtype=np.int64)
    table.write(pa.table({"id": ids, "k": (ids % 100).astype(np.int32)}, schema=SCHEMA))
    return table


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ArrowScan]]:
    """The Arrow scans Polars' lazy scan and DuckDB's registered table read through."""
    made: list[ArrowScan] = []

    class Recorded(ArrowScan):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(strata.polars, "ArrowScan", Recorded)
    monkeypatch.setattr(strata.duckdb, "ArrowScan", Recorded)
    yield made


def groups_read(scans: list[ArrowScan]) -> tuple[int, int, int]:
    return (sum(s.read_stats.files for s in scans), sum(s.read_stats.row_groups for s in scans),
            sum(s.read_stats.row_groups_read for s in scans))


def test_a_filter_prunes_row_groups_of_a_file_it_reads(table: strata.Table) -> None:
    everything = table.arrow_scan()
    assert everything.to_arrow().num_rows == ROWS
    assert (everything.read_stats.files, everything.read_stats.row_groups_read) == (1, 4)

    scan = table.arrow_scan(filter=col("id") < 1000)
    assert scan.to_arrow().column("id").to_pylist() == list(range(1000))
    assert (scan.read_stats.files, scan.read_stats.row_groups, scan.read_stats.row_groups_read) == (1, 4, 1)


def test_polars_and_duckdb_prune_row_groups(table: strata.Table, scans: list[ArrowScan],
                                           native_reads: list[tuple[list[str], object]]) -> None:
    """Polars' scan of a local append table hands its file to Polars' own reader, whose row-group
    statistics prune (Polars counts none for us): then it is the one file, with the predicate."""
    for predicate, ids in ((pl.col("id") >= ROWS - 10, list(range(ROWS - 10, ROWS))),
                           (pl.col("id").is_in([5, 6]), [5, 6])):
        scans.clear()
        native_reads.clear()
        frame = strata.polars.scan(table).filter(predicate).select("id").collect()
        assert sorted(frame["id"].to_list()) == ids
        if native_reads:
            [(paths, pushed)] = native_reads
            assert len(paths) == 1 and pushed is not None and not table.schema.primary_keys
        else:
            assert groups_read(scans) == (1, 4, 1)

    scans.clear()
    rows = table.to_duckdb(name="t", native=False).sql("SELECT count(*) FROM t WHERE id IN (5, 6)").fetchall()
    assert rows == [(2,)]
    assert groups_read(scans) == (1, 4, 1)


def test_a_scan_with_its_read_statistics_ships_to_another_process(table: strata.Table) -> None:
    """Ray pickles what its tasks read with (cloudpickle); the copy counts its own reads."""
    pickle = pytest.importorskip("ray.cloudpickle")
    scan = table.arrow_scan(filter=col("id") < 1000)
    scan.to_arrow()
    copy = pickle.loads(pickle.dumps(scan))
    assert copy.to_arrow().column("id").to_pylist() == list(range(1000))
    assert (copy.read_stats.files, copy.read_stats.row_groups_read) == (2, 2)  # the original's read, then its own
    assert (scan.read_stats.files, scan.read_stats.row_groups_read) == (1, 1)
