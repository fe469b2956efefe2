"""$table_indexes (Paimon's TableIndexesTable): one row per index file of a snapshot's index
manifest, with each deletion-vector file's ranges (data file, offset, length, cardinality)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import strata
from strata.cli import main
from strata.deletionvectors import read_vector
from strata.deletionvectors.index_file import DeletionFile
from strata.fs import FileIO
from strata.table.system_table import SystemTable
from strata.table.system_tables import DV_RANGE, TABLE_INDEXES, system_table_schema

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string(), nullable=False),
                    pa.field("v", pa.int64())])


def _rows(ids: range, v: int = 0) -> pa.Table:
    return pa.table({"id": list(ids), "dt": ["a" if i % 2 else "b" for i in ids], "v": [i + v for i in ids]},
                    schema=SCHEMA)


@pytest.fixture
def dv(catalog: strata.Catalog) -> strata.Table:
    t = catalog.create_table("db.dv", SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                             options={"bucket": "2", "deletion-vectors.enabled": "true",
                                      "compaction.delete-ratio-threshold": "0.9"})  # keep the vectors
    t.write(_rows(range(100)))
    t.write(_rows(range(0, 100, 3), v=1000))  # updates: the old rows are marked in deletion vectors
    return t


def test_schema_is_paimons() -> None:
    assert TABLE_INDEXES.names == ["partition", "bucket", "index_type", "file_name", "file_size", "row_count",
                                   "dv_ranges", "row_range_start", "row_range_end", "index_field_id",
                                   "index_field_name"]
    assert [f.nullable for f in TABLE_INDEXES] == [True, False, False, False, False, False, True, True, True,
                                                   True, True]
    assert TABLE_INDEXES.field("dv_ranges").type == pa.list_(DV_RANGE)
    assert [f.name for f in DV_RANGE] == ["f0", "f1", "f2", "_CARDINALITY"]


def test_deletion_vector_files_and_their_ranges(dv: strata.Table, warehouse_io: FileIO) -> None:
    data = dv.system_table("table_indexes")
    assert data.schema == system_table_schema(dv, "table_indexes") == TABLE_INDEXES
    rows = data.to_pylist()
    snapshot = dv.latest_snapshot()
    assert snapshot is not None
    live = dv.manifest_store.read_index_manifest(snapshot.index_manifest)
    assert [r["file_name"] for r in rows] == [e.file_name for e in live] and rows
    marked = {}  # data file -> deleted rows, from the scan's deletion files
    for split in dv.scan():
        for name, deletion in (split.deletion_files or {}).items():
            marked[name] = deletion.cardinality
    seen = {}
    for r in rows:
        assert r["index_type"] == "DELETION_VECTORS"
        assert r["partition"] in ("{a}", "{b}") and r["bucket"] in (0, 1)
        path = f"{dv.path}/index/{r['file_name']}"
        assert r["file_size"] == len(warehouse_io.read_bytes(path))
        assert r["row_count"] == len(r["dv_ranges"])
        assert r["row_range_start"] is r["row_range_end"] is r["index_field_id"] is r["index_field_name"] is None
        for rng in r["dv_ranges"]:
            vector = read_vector(dv.file_io, DeletionFile(path, rng["f1"], rng["f2"], rng["_CARDINALITY"]))
            assert len(vector) == rng["_CARDINALITY"] > 0
            seen[rng["f0"]] = rng["_CARDINALITY"]
    assert seen == marked
    assert sum(seen.values()) == 34  # every updated key has exactly one old row marked

    # the same rows through the catalog, and projected / filtered
    via_catalog = dv.catalog.get_table("db.dv$table_indexes")  # type: ignore[union-attr]
    assert isinstance(via_catalog, SystemTable)
    assert via_catalog.to_arrow().equals(data)
    picked = dv.system_table("table_indexes", columns=["partition", "row_count"], filter=strata.col("bucket") == 0)
    assert picked.to_pylist() == [{"partition": r["partition"], "row_count": r["row_count"]}
                                  for r in rows if r["bucket"] == 0]


def test_time_travel_and_tables_without_indexes(dv: strata.Table, catalog: strata.Catalog) -> None:
    assert dv.system_table("table_indexes", snapshot_id=1).num_rows == 0  # before any row was marked
    first = dv.system_table("table_indexes").to_pylist()
    dv.compact(full=True)  # rewrites the marked files: no vector is left
    after = dv.system_table("table_indexes")
    assert after.num_rows == 0
    assert dv.system_table("table_indexes", snapshot_id=dv.latest_snapshot().id - 1).to_pylist() == first
    plain = catalog.create_table("db.plain", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    assert plain.system_table("table_indexes").equals(TABLE_INDEXES.empty_table())
    plain.write(_rows(range(5)))
    assert plain.system_table("table_indexes").num_rows == 0
    with pytest.raises(ValueError, match="table_indexes"):
        plain.system_table("table_indexes", incremental_between=(0, 1))


def test_cli_reads_table_indexes(capsys: pytest.CaptureFixture[str], warehouse: str, dv: strata.Table) -> None:
    code = main(["--warehouse", warehouse, "read", "db.dv$table_indexes", "--format", "json",
                 "--columns", "partition,bucket,index_type,row_count"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = json.loads(captured.out)
    expected = [{k: r[k] for k in ("partition", "bucket", "index_type", "row_count")}
                for r in dv.system_table("table_indexes").to_pylist()]
    assert rows == expected and rows
