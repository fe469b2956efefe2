"""Iceberg format version 3 (metadata.iceberg.format-version=3): row lineage in the metadata, and
deletion vectors as Puffin ``deletion-vector-v1`` blobs. Judged by pyiceberg 0.12.0 (which reads
Puffin deletion vectors) and by the spec reader of these tests (iceberg_spec_reader), both against
Strata's own read, commit after commit and with time travel."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from iceberg_spec_reader import SpecView, read_snapshot
from pyiceberg_oracle import read_iceberg

import strata
from strata.iceberg import latest_metadata_location
from strata.iceberg.puffin import read_footer
from strata.manifest.avro_container import read_container
from strata.table.table import Table

pytestmark = pytest.mark.pyiceberg

V3 = {"metadata.iceberg.storage": "table-location", "metadata.iceberg.format-version": "3"}
SCHEMA = pa.schema([pa.field("k", pa.int32(), nullable=False), ("v", pa.int64()), ("s", pa.string())])


def batch(keys: list[int], v: int, s: str) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int32()), "v": [v] * len(keys), "s": [s] * len(keys)}, schema=SCHEMA)


def base(n: int) -> pa.Table:
    """Keys 0..n-1 with random values: a file clearly larger than one of a few deletes, so that
    moving the deletes up marks rows instead of merging with it (size ratio)."""
    return batch(list(range(n)), 0, "a").set_column(
        1, "v", pa.array(np.random.default_rng(n).integers(0, 2**62, n)))


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*[table.column(c).to_pylist() for c in table.column_names], strict=True), key=repr)


def metadata(table: Table) -> dict[str, Any]:
    return dict(json.loads(table.file_io.read_bytes(latest_metadata_location(table) or "")))


def spec_view(table: Table, options: dict[str, str], snapshot_id: int | None = None) -> SpecView:
    return read_snapshot(latest_metadata_location(table) or "", snapshot_id, options)


def assert_same(table: Table, options: dict[str, str], snapshot_id: int | None = None,
                pyiceberg: bool = True) -> SpecView:
    """pyiceberg's rows and the spec reader's rows equal Strata's own read of the snapshot."""
    expected = rows(table.to_arrow(snapshot_id=snapshot_id))
    view = spec_view(table, options, snapshot_id)
    assert rows(view.rows) == expected, f"spec reader, snapshot {snapshot_id}"
    if pyiceberg:
        got, facts = read_iceberg(latest_metadata_location(table), options, snapshot_id=snapshot_id)
        assert rows(got) == expected, f"pyiceberg, snapshot {snapshot_id}"
        if snapshot_id is None:
            assert facts["current"] == table.latest_snapshot().id
    return view


def assert_deletion_vectors(table: Table, view: SpecView) -> None:
    """Every delete entry is a deletion vector: a blob of a Puffin file in the metadata directory
    whose footer agrees with the entry, one per live data file at most."""
    live = {f["file_path"] for f in view.data_files}
    seen = set()
    footers: dict[str, dict[str, Any]] = {}
    for d in view.deletes:
        assert (d["content"], d["file_format"]) == (1, "PUFFIN"), d
        assert d["file_path"].endswith(".puffin") and "/metadata/" in d["file_path"]
        assert d["referenced_data_file"] in live and d["referenced_data_file"] not in seen
        seen.add(d["referenced_data_file"])
        assert d["first_row_id"] is None, "the first_row_id of delete files is always null"
        if d["file_path"] not in footers:
            data = table.file_io.read_bytes(d["file_path"])
            assert d["file_size_in_bytes"] == len(data)
            footers[d["file_path"]] = read_footer(data, d["file_path"])
        blob = next(b for b in footers[d["file_path"]]["blobs"]
                    if b["properties"]["referenced-data-file"] == d["referenced_data_file"])
        assert (blob["offset"], blob["length"]) == (d["content_offset"], d["content_size_in_bytes"])
        assert blob["properties"]["cardinality"] == str(d["record_count"]) == str(len(d["vector"]))
        # path bounds as well: pyiceberg pairs a delete with its data file by them
        assert d["lower_bounds"] == d["upper_bounds"] == [{"key": 2147483546,
                                                            "value": d["referenced_data_file"].encode()}]


@pytest.mark.parametrize("bitmap64", ["true", "false"])
def test_primary_key_deletion_vectors_as_puffin(catalog: strata.Catalog, warehouse_options: dict[str, str],
                                                bitmap64: str) -> None:
    """Deletes and upserts on a merge-on-write table: Puffin deletion vectors, read right by
    pyiceberg commit after commit and at older snapshots (32-bit vectors widened to the blob)."""
    # vectors kept up to 20% marked rows: a table published to Iceberg would purge at 1%
    table = catalog.create_table("db.dv", SCHEMA, primary_keys=["k"], options={
        **V3, "bucket": "2", "deletion-vectors.enabled": "true", "deletion-vectors.bitmap64": bitmap64,
        "compaction.delete-ratio-threshold": "0.2"})
    table.write(batch(list(range(300)), 0, "a"))
    table.compact(full=True)
    for round_ in range(3):
        table.write(batch(list(range(round_, 300, 7)), -round_, f"r{round_}"))
        table.delete(batch([round_ * 11 + 3, 200 + round_], 0, ""))
        view = assert_same(table, warehouse_options, pyiceberg=round_ != 1)
        assert view.format_version == 3
        assert view.deletes, "upserts and deletes mark rows of the compacted files"
        assert_deletion_vectors(table, view)
    assert table.to_arrow().num_rows == 294
    history = [s.id for s in table.snapshots()]
    for older in (history[2], history[len(history) // 2]):
        assert_same(table, warehouse_options, snapshot_id=older)
    table.compact(full=True)
    view = assert_same(table, warehouse_options)
    assert view.deletes == []


def test_append_table_delete_where_as_puffin(catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    """An append table's delete_where marks rows by deletion vectors: each snapshot reads right,
    and appends after it carry the delete manifest forward."""
    table = catalog.create_table("db.events", SCHEMA, partition_keys=["s"], options={
        **V3, "deletion-vectors.enabled": "true", "deletion-vectors.bitmap64": "true"})
    for i in range(3):
        table.write(pa.concat_tables([batch(list(range(i * 100, i * 100 + 50)), i, "x"),
                                      batch(list(range(i * 100 + 50, i * 100 + 100)), i, "y")]))
    table.delete_where(strata.col("k").isin(range(0, 300, 3)))
    deleted = table.latest_snapshot().id
    view = assert_same(table, warehouse_options)
    assert len(view.deletes) == 6, "one vector per data file, every file has rows with k % 3 == 0"
    assert_deletion_vectors(table, view)
    table.write(batch([1000, 1001], 9, "x"))
    view = assert_same(table, warehouse_options)
    assert_deletion_vectors(table, view)
    lists = [list(read_container(table.file_io.read_bytes(s["manifest-list"]), "list"))
             for s in metadata(table)["snapshots"][-2:]]
    assert [m["manifest_path"] for m in lists[1][:-1]] == [m["manifest_path"] for m in lists[0]], \
        "the append carries the manifests (the delete manifest too) forward"
    table.delete_where(strata.col("k") == 1000)
    assert_same(table, warehouse_options)
    assert_same(table, warehouse_options, snapshot_id=deleted)
    assert_same(table, warehouse_options, snapshot_id=deleted - 1)


def test_row_lineage_metadata(catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    """next-row-id, first-row-id / added-rows on snapshots, first_row_id on data manifests (kept
    when a manifest is carried forward, null on delete manifests) and null in data files."""
    table = catalog.create_table("db.lineage", SCHEMA, options={
        **V3, "deletion-vectors.enabled": "true", "deletion-vectors.bitmap64": "true"})
    for i in range(3):
        table.write(batch(list(range(i * 10, i * 10 + 10 + i)), i, "x"))
    table.delete_where(strata.col("k") < 5)  # new deletes only: the data manifests keep their row-id ranges
    table.write(batch([500], 5, "y"))
    meta = metadata(table)
    assert meta["format-version"] == 3
    snaps = meta["snapshots"]
    assert snaps[0]["first-row-id"] == 0
    for before, after in itertools.pairwise(snaps):
        assert after["first-row-id"] == before["first-row-id"] + before["added-rows"]
    assert meta["next-row-id"] == snaps[-1]["first-row-id"] + snaps[-1]["added-rows"]
    assert [s["added-rows"] for s in snaps] == [10, 11, 12, 0, 1]

    previous: dict[str, int | None] = {}
    for snap in snaps:
        listing = read_container(table.file_io.read_bytes(snap["manifest-list"]), "list")
        assigned = 0
        for m in listing:
            entries = read_container(table.file_io.read_bytes(m["manifest_path"]), "manifest")
            if m["content"] == 1:
                assert m["first_row_id"] is None
                continue
            assert m["first_row_id"] is not None
            if m["manifest_path"] in previous:
                assert m["first_row_id"] == previous[m["manifest_path"]], "carried forward with its range"
            else:
                assert m["first_row_id"] == snap["first-row-id"] + assigned
                assigned += m["added_rows_count"] + m["existing_rows_count"]
            assert all(e["data_file"]["first_row_id"] is None for e in entries), "inherited when read"
            previous[m["manifest_path"]] = m["first_row_id"]
        assert assigned == snap["added-rows"]
    view = assert_same(table, warehouse_options, pyiceberg=False)
    ranges = sorted((f["first_row_id"], f["first_row_id"] + f["record_count"]) for f in view.data_files)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges)), "disjoint row-id ranges"
    assert ranges[-1][1] <= meta["next-row-id"]


def test_format_upgrade_carries_history_and_downgrade_starts_anew(
        catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    """2 -> 3: the history goes on (position-delete files stay valid in the older snapshots,
    next-row-id starts at 0); 3 -> 2: Iceberg has no downgrade, the history starts anew."""
    table = catalog.create_table("db.up", SCHEMA, primary_keys=["k"], options={
        "metadata.iceberg.storage": "table-location", "bucket": "1", "deletion-vectors.enabled": "true"})
    table.write(base(2000))
    table.compact(full=True)
    table.delete(batch([1, 2], 0, ""))
    v2_snapshot = table.latest_snapshot().id
    v2_view = spec_view(table, warehouse_options)
    assert v2_view.format_version == 2 and {d["file_format"] for d in v2_view.deletes} == {"PARQUET"}

    table = table.set_options(**{"metadata.iceberg.format-version": "3"})
    table.delete(batch([3], 0, ""))
    meta = metadata(table)
    assert meta["format-version"] == 3
    assert [s["snapshot-id"] for s in meta["snapshots"]] == list(range(1, table.latest_snapshot().id + 1))
    first_v3 = next(s for s in meta["snapshots"] if "first-row-id" in s)
    assert first_v3["snapshot-id"] == v2_snapshot + 1 and first_v3["first-row-id"] == 0
    view = assert_same(table, warehouse_options)
    assert_deletion_vectors(table, view)
    assert_same(table, warehouse_options, snapshot_id=v2_snapshot)

    last_v3 = table.latest_snapshot().id
    table = table.set_options(**{"metadata.iceberg.format-version": "2"})
    table.delete(batch([4], 0, ""))  # two snapshots: the write and its compaction
    meta = metadata(table)
    assert meta["format-version"] == 2 and "next-row-id" not in meta
    assert [s["snapshot-id"] for s in meta["snapshots"]] == list(range(last_v3 + 1, table.latest_snapshot().id + 1))
    view = assert_same(table, warehouse_options)
    assert {d["file_format"] for d in view.deletes} == {"PARQUET"}


def test_expired_snapshots_take_their_puffin_files(catalog: strata.Catalog, warehouse_io: Any) -> None:
    table = catalog.create_table("db.expiring", SCHEMA, primary_keys=["k"], options={
        **V3, "bucket": "1", "deletion-vectors.enabled": "true", "snapshot.num-retained.min": "2",
        "snapshot.num-retained.max": "2", "snapshot.time-retained": "1 ms"})
    table.write(base(2000))
    table.compact(full=True)
    for k in range(4):
        table.delete(batch([k], 0, ""))
    meta = metadata(table)
    kept = [s["snapshot-id"] for s in meta["snapshots"]]
    assert len(kept) == 2
    reachable = set()
    for s in meta["snapshots"]:
        for m in read_container(table.file_io.read_bytes(s["manifest-list"]), "list"):
            if m["content"] == 1:
                reachable |= {e["data_file"]["file_path"].rsplit("/", 1)[-1]
                              for e in read_container(table.file_io.read_bytes(m["manifest_path"]), "m")}
    puffins = {s.path.rsplit("/", 1)[-1] for s in warehouse_io.list_status(f"{table.path}/metadata")
               if s.path.endswith(".puffin")}
    assert puffins == reachable and puffins
    assert table.to_arrow().num_rows == 2000 - 4
