"""The Iceberg metadata Strata publishes (metadata.iceberg.storage), judged by pyiceberg: the rows an
Iceberg reader gets equal Strata's own read, commit after commit, for append, primary-key and
deletion-vector tables, with time travel, filters, schema evolution, expiry and failures."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg_oracle import read_iceberg

import strata
from strata.cli import main as cli
from strata.errors import OptionError
from strata.format.bucket import hash_row, java_bucket
from strata.fs.decoded_cache import DecodedFileCache
from strata.iceberg import IcebergSync, latest_metadata_location
from strata.iceberg import layout as layout_module
from strata.iceberg import manifests as manifests_module
from strata.iceberg import sync as sync_module
from strata.iceberg.layout import read_layouts, split_units
from strata.iceberg.manifests import EXISTING, ManifestFile, decode_manifest_list, encode_manifest_list, read_entries
from strata.io import data_file_writer
from strata.table.table import Table

pytestmark = pytest.mark.pyiceberg

ICEBERG = {"metadata.iceberg.storage": "table-location"}
TYPES = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("day", pa.string()), ("flag", pa.bool_()), ("small", pa.int16()),
    ("qty", pa.int32()), ("price", pa.float64()), ("amount", pa.decimal128(10, 2)),
    ("big", pa.decimal128(30, 6)), ("name", pa.string()), ("blob", pa.binary()), ("d", pa.date32()),
    ("ts", pa.timestamp("us")), ("ts_ms", pa.timestamp("ms")), ("tz", pa.timestamp("us", tz="UTC"))])


def typed_rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    base = dt.datetime(2026, 11, 1, 12, 30)
    return pa.table({
        "id": ids, "day": [f"2026-11-0{i % 3 + 1}" for i in ids], "flag": [i % 2 == 0 if i % 5 else None for i in ids],
        "small": [i % 300 - 150 for i in ids], "qty": [i * 7 if i % 4 else None for i in ids],
        "price": [i / 4 for i in ids], "amount": [Decimal(i) / 100 for i in ids],
        "big": [Decimal(i) * Decimal("1234567.000001") if i % 6 else None for i in ids],
        "name": [f"name-{i:05d}" if i % 7 else None for i in ids], "blob": [bytes([i % 256, 1]) for i in ids],
        "d": [dt.date(2026, 1, 1) + dt.timedelta(days=i) for i in ids],
        "ts": [base + dt.timedelta(seconds=i, microseconds=i) for i in ids],
        "ts_ms": [base + dt.timedelta(milliseconds=i) for i in ids],
        "tz": [dt.datetime(2026, 11, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=i) for i in ids]}, schema=TYPES)


def rows(table: pa.Table, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Rows as sortable tuples of plain values (Iceberg widens SMALLINT to int: same values)."""
    columns = columns or table.column_names
    values = [table.column(c).to_pylist() for c in columns]
    return sorted(zip(*values, strict=True), key=repr) if columns else []


def iceberg(table: Table, options: dict[str, str], **kwargs: Any) -> tuple[pa.Table, dict[str, Any]]:
    location = latest_metadata_location(table)
    assert location is not None, "no Iceberg metadata was published"
    return read_iceberg(location, options, **kwargs)


def assert_same(table: Table, options: dict[str, str], snapshot_id: int | None = None) -> dict[str, Any]:
    expected = table.to_arrow(snapshot_id=snapshot_id)
    got, facts = iceberg(table, options, snapshot_id=snapshot_id)
    assert got.column_names == expected.column_names
    assert rows(got) == rows(expected)
    return facts


def test_append_table_every_commit_time_travel_filters_and_pruning(catalog: strata.Catalog,
                                                                   warehouse_options: dict[str, str]) -> None:
    table = catalog.create_table("db.events", TYPES, partition_keys=["day"], options=ICEBERG)
    for commit in range(3):
        table.write(typed_rows(commit * 40, 40))
        facts = assert_same(table, warehouse_options)
        assert facts["current"] == table.latest_snapshot().id  # Iceberg snapshot ids are Paimon's
    assert facts["snapshots"] == [1, 2, 3]
    assert_same(table, warehouse_options, snapshot_id=1)
    assert_same(table, warehouse_options, snapshot_id=2)

    got, facts = iceberg(table, warehouse_options, row_filter="day = '2026-11-02' and qty > 100")
    expected = table.to_arrow(filter=(strata.col("day") == "2026-11-02") & (strata.col("qty") > 100))
    assert rows(got) == rows(expected) and expected.num_rows > 0
    total = iceberg(table, warehouse_options)[1]["planned"]
    assert facts["planned"] * 3 == total, "the partition filter must prune two thirds of the files"
    _, point = iceberg(table, warehouse_options, row_filter="id = 5")
    assert (point["planned"], total) == (3, 9), "column bounds must prune the later commits' files"


def test_deletion_vector_table_is_fresh_with_position_deletes(catalog: strata.Catalog,
                                                              warehouse_options: dict[str, str]) -> None:
    schema = pa.schema([pa.field("k", pa.int32(), nullable=False), ("v", pa.int64()), ("s", pa.string())])
    table = catalog.create_table("db.dv", schema, primary_keys=["k"], options={
        **ICEBERG, "bucket": "2", "deletion-vectors.enabled": "true", "deletion-vectors.bitmap64": "true"})
    table.write(pa.table({"k": pa.array(range(200), pa.int32()), "v": range(200), "s": ["a"] * 200}, schema=schema))
    assert_same(table, warehouse_options)
    for round_ in range(3):
        keys = list(range(round_, 200, 7))
        table.write(pa.table({"k": pa.array(keys, pa.int32()), "v": [-round_] * len(keys),
                              "s": [f"r{round_}"] * len(keys)}, schema=schema))
        table.delete(pa.table({"k": pa.array([round_ * 11 + 3], pa.int32()), "v": [None], "s": [None]},
                              schema=schema))
        assert_same(table, warehouse_options)
    table.compact(full=True)
    facts = assert_same(table, warehouse_options)
    assert table.to_arrow().num_rows == 197
    got, _ = iceberg(table, warehouse_options, row_filter="v = -2")
    assert rows(got) == rows(table.to_arrow(filter=strata.col("v") == -2))
    assert facts["snapshots"][-1] == table.latest_snapshot().id


def test_primary_key_table_without_vectors_shows_its_top_level(catalog: strata.Catalog,
                                                               warehouse_options: dict[str, str]) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    table = catalog.create_table("db.pk", schema, primary_keys=["k"], options={**ICEBERG, "bucket": "1"})
    table.write(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema))
    got, _ = iceberg(table, warehouse_options)
    assert got.num_rows == 0, "level-0 files need merging: an Iceberg reader must not see them"
    table.compact(full=True)
    assert_same(table, warehouse_options)
    table.write(pa.table({"k": [2], "v": ["B"]}, schema=schema))
    got, _ = iceberg(table, warehouse_options)
    assert rows(got) == [(1, "a"), (2, "b"), (3, "c")], "the top level stays as of the last full compaction"
    assert rows(table.to_arrow(read_optimized=True)) == rows(got)


def test_schema_evolution_is_carried_over(catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    schema = pa.schema([("id", pa.int64()), ("a", pa.string())])
    table = catalog.create_table("db.evolving", schema, options=ICEBERG)
    table.write(pa.table({"id": [1, 2], "a": ["x", "y"]}, schema=schema))
    table = table.add_column("b", pa.float64())
    table.write(pa.table({"id": [3], "a": ["z"], "b": [1.5]}))
    assert_same(table, warehouse_options)
    table = table.rename_column("a", "label")
    table.write(pa.table({"id": [4], "label": ["w"], "b": [2.5]}))
    assert_same(table, warehouse_options)
    metadata = json.loads(table.file_io.read_bytes(latest_metadata_location(table) or ""))
    assert [s["schema-id"] for s in metadata["schemas"]] == [0, 1, 2]
    assert metadata["current-schema-id"] == 2


def test_expiry_keeps_iceberg_in_step(catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    schema = pa.schema([("id", pa.int64())])
    table = catalog.create_table("db.expiring", schema, options={
        **ICEBERG, "snapshot.num-retained.min": "2", "snapshot.num-retained.max": "3",
        "snapshot.time-retained": "1 ms"})
    for i in range(8):
        table.write(pa.table({"id": [i]}, schema=schema))
    paimon_ids = [s.id for s in table.snapshots()]
    facts = assert_same(table, warehouse_options)
    assert facts["snapshots"] == paimon_ids == [7, 8]  # num-retained.min, the time limit being past
    listing = [s.path.rsplit("/", 1)[-1] for s in table.file_io.list_status(f"{table.path}/metadata")]
    assert sorted(n for n in listing if n.endswith(".metadata.json")) == ["v8.metadata.json"]
    assert len([n for n in listing if n.startswith("snap-")]) == 2, listing
    # the manifests still listed are exactly those the kept snapshots reach
    reachable = {m.path.rsplit("/", 1)[-1] for sid in paimon_ids
                 for m in decode_manifest_list(table.file_io.read_bytes(_manifest_list(table, sid)), "list")}
    assert {n for n in listing if n.endswith(".avro") and not n.startswith("snap-")} == reachable


def _manifest_list(table: Table, snapshot_id: int) -> str:
    metadata = json.loads(table.file_io.read_bytes(latest_metadata_location(table) or ""))
    return next(s["manifest-list"] for s in metadata["snapshots"] if s["snapshot-id"] == snapshot_id)


def test_appends_carry_manifests_forward(catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    """An APPEND writes one manifest and reuses the previous ones: no rewrite per commit."""
    schema = pa.schema([("id", pa.int64())])
    table = catalog.create_table("db.appends", schema, options=ICEBERG)
    for i in range(4):
        table.write(pa.table({"id": [i]}, schema=schema))
    lists = [decode_manifest_list(table.file_io.read_bytes(_manifest_list(table, sid)), "list") for sid in (3, 4)]
    assert [m.path for m in lists[1][:-1]] == [m.path for m in lists[0]]
    assert lists[1][-1].added_snapshot_id == 4 and lists[1][-1].added_files == 1


@pytest.mark.local_storage_only(reason="blocks the metadata directory with a local file")
def test_a_snapshot_removing_files_rewrites_only_the_manifests_listing_them(
        catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    """An overwrite (or a compaction) carries the manifests that list none of the files it
    removes and rewrites those that do, their other files EXISTING with the snapshot and
    sequence number they were added with: rewriting every manifest cost each such commit what
    the whole table holds."""
    schema = pa.schema([("p", pa.int32()), ("id", pa.int64())])
    table = catalog.create_table("db.parts", schema, partition_keys=["p"], options=ICEBERG)
    table.write(pa.table({"p": pa.array([0, 1, 2, 3], pa.int32()), "id": [0, 10, 20, 30]}))  # one manifest
    table.write(pa.table({"p": pa.array([4], pa.int32()), "id": [40]}))  # another
    table.write(pa.table({"p": pa.array([1], pa.int32()), "id": [11]}), mode="overwrite-dynamic")
    before, after = (decode_manifest_list(table.file_io.read_bytes(_manifest_list(table, sid)), "list")
                     for sid in (2, 3))
    assert after[1] == before[1], "the manifest without partition 1 is carried as it is"
    rewritten, added = after[0], after[2]
    assert rewritten.path != before[0].path and (rewritten.added_files, rewritten.existing_files) == (0, 3)
    assert (added.added_files, added.existing_files, added.added_snapshot_id) == (1, 0, 3)
    entries = read_entries(table.file_io, rewritten, IcebergSync(table).spec)
    assert {(e.status, e.snapshot_id, e.sequence_number) for e in entries} == {(EXISTING, 1, 1)}
    assert rewritten.min_sequence_number == 1
    assert_same(table, warehouse_options)
    assert_same(table, warehouse_options, snapshot_id=2)


def test_a_rewrite_keeps_the_touched_partitions_apart(catalog: strata.Catalog, warehouse_options: dict[str, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewritten manifest with enough other partitions puts the files left of the partitions
    the commit touched in a manifest of their own: the next compaction there rewrites that one."""
    monkeypatch.setattr(sync_module, "SPLIT_FROM", 2)
    schema = pa.schema([("p", pa.int32()), ("id", pa.int64())])
    table = catalog.create_table("db.split", schema, partition_keys=["p"],
                                 options={**ICEBERG, "bucket": "2", "bucket-key": "id"})
    one, other = (next(i for i in range(100) if java_bucket(hash_row([i], [pa.int64()]), 2) == b) for b in (0, 1))
    table.write(pa.table({"p": pa.array([0, 1, 1, 2, 3], pa.int32()), "id": [0, one, other, 3, 4]}))
    table.write(pa.table({"p": pa.array([1], pa.int32()), "id": [one]}))  # a second file in one bucket of p=1
    table.compact(full=True, partition={"p": 1})  # merges that bucket's two files; the other bucket has one
    compacted = table.latest_snapshot().id
    manifests = decode_manifest_list(table.file_io.read_bytes(_manifest_list(table, compacted)), "list")
    spec = IcebergSync(table).spec
    partitions = [sorted({e.file.partition for e in read_entries(table.file_io, m, spec)}) for m in manifests]
    assert partitions == [[(0,), (2,), (3,)], [(1,)], [(1,)]], "the others, p=1's other bucket, the merged file"
    assert_same(table, warehouse_options)


def test_new_deletion_vectors_rewrite_the_delete_manifest_not_the_data_manifests(
        catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    """An upsert into a deletion-vector table marks the replaced rows in their files (large
    enough not to be rewritten): the data manifests are carried as they are, the new rows get a
    manifest of their own and the delete manifest is written anew."""
    schema = pa.schema([pa.field("k", pa.int32(), nullable=False), ("v", pa.int64())])
    table = catalog.create_table("db.dvs", schema, primary_keys=["k"], options={
        **ICEBERG, "bucket": "2", "deletion-vectors.enabled": "true"})
    table.write(pa.table({"k": pa.array(range(20_000), pa.int32()), "v": range(20_000)}, schema=schema))
    table.compact(full=True)
    compacted = table.latest_snapshot().id
    table.write(pa.table({"k": pa.array([3, 50], pa.int32()), "v": [-3, -50]}, schema=schema))
    upserted = table.latest_snapshot().id
    before, after = (decode_manifest_list(table.file_io.read_bytes(_manifest_list(table, sid)), "list")
                     for sid in (compacted, upserted))
    assert before[0] in after, "the compaction's data manifest is carried"
    assert [(m.content, m.added_snapshot_id) for m in after if m != before[0]] == [(1, upserted), (0, upserted)]
    assert_same(table, warehouse_options)
    assert rows(iceberg(table, warehouse_options, row_filter="k = 3")[0]) == [(3, -3)]


def test_a_new_process_reads_only_the_manifests_that_may_list_the_removed_files(
        catalog: strata.Catalog, warehouse_options: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing decoded yet (a new process): the manifests' partition summaries rule out those of
    other partitions before any is read."""
    schema = pa.schema([("p", pa.int32()), ("id", pa.int64())])
    table = catalog.create_table("db.cold", schema, partition_keys=["p"], options=ICEBERG)
    for p in range(4):
        table.write(pa.table({"p": pa.array([p, p], pa.int32()), "id": [10 * p, 10 * p + 1]}))
    decoded: list[str] = []
    decode = manifests_module.decode_entries
    with monkeypatch.context() as patch:
        patch.setattr(manifests_module, "DECODED_ENTRIES", DecodedFileCache(max_weight=1000))
        patch.setattr(manifests_module, "LIVE_PATHS", DecodedFileCache(max_weight=1000))
        patch.setattr(manifests_module, "decode_entries",
                      lambda data, spec, where: decoded.append(where) or decode(data, spec, where))
        table.write(pa.table({"p": pa.array([2], pa.int32()), "id": [99]}), mode="overwrite-dynamic")
    assert len(decoded) == 1  # the manifest of p=2; all four without the summaries
    assert_same(table, warehouse_options)


def test_rewritten_manifests_keep_typed_partition_values(catalog: strata.Catalog,
                                                         warehouse_options: dict[str, str]) -> None:
    """Date, timestamp, decimal and string partitions read back from a manifest and written
    into its rewrite: the partition summaries and pruning still hold."""
    table = catalog.create_table("db.typed", TYPES, partition_keys=["d", "ts", "amount", "day"], options=ICEBERG)
    table.write(typed_rows(0, 6))
    table.write(typed_rows(2, 1), mode="overwrite-dynamic")
    after = decode_manifest_list(table.file_io.read_bytes(_manifest_list(table, 2)), "list")
    assert [(m.added_files, m.existing_files) for m in after] == [(0, 5), (1, 0)]
    assert_same(table, warehouse_options)
    got, facts = iceberg(table, warehouse_options, row_filter="d = '2026-01-04'")
    assert rows(got) == rows(table.to_arrow(filter=strata.col("d") == dt.date(2026, 1, 4)))
    assert facts["planned"] == 1


def test_a_compaction_below_the_top_level_keeps_the_manifests(catalog: strata.Catalog,
                                                               warehouse_options: dict[str, str]) -> None:
    """A primary-key table shows Iceberg its top level only: a compaction that leaves the top
    level alone changes no manifest."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    table = catalog.create_table("db.pk", schema, primary_keys=["k"],
                                 options={**ICEBERG, "bucket": "1", "write-only": "true"})
    table.write(pa.table({"k": range(100_000), "v": ["a"] * 100_000}, schema=schema))
    table.compact(full=True)
    for i in range(5):  # five small sorted runs against a large top level: merged into the level below it
        table.write(pa.table({"k": [i], "v": [f"x{i}"]}, schema=schema))
    before = table.latest_snapshot().id
    table.compact(full=False)
    compacted = table.latest_snapshot()
    levels = sorted(f.level for split in table.new_scan().plan().splits for f in split.files)
    assert compacted.commit_kind == "COMPACT" and levels == [table.core.num_levels - 2, table.core.num_levels - 1]
    lists = [decode_manifest_list(table.file_io.read_bytes(_manifest_list(table, sid)), "list")
             for sid in (before, compacted.id)]
    assert lists[1] == lists[0]
    got, _ = iceberg(table, warehouse_options)
    assert rows(got) == rows(table.to_arrow(read_optimized=True))


def test_failed_sync_never_fails_the_commit_and_the_cli_catches_up(catalog: strata.Catalog, warehouse: str,
                                                                   warehouse_options: dict[str, str],
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    schema = pa.schema([("id", pa.int64())])
    table = catalog.create_table("db.blocked", schema, options=ICEBERG)
    table.file_io.delete_dir(f"{table.path}/metadata")  # the schema-only metadata of the new table
    write = table.file_io.write_bytes

    def refused(path: str, data: bytes) -> None:  # the store refuses the metadata directory (a local
        if f"{table.path}/metadata/" in path:  # file in its place did it, but S3 keys have no parents)
            raise OSError(f"injected: the store refused {path}")
        write(path, data)

    monkeypatch.setattr(table.file_io, "write_bytes", refused)
    failures = _sample("strata_iceberg_sync_failures_total", "db.blocked")
    result = table.write(pa.table({"id": [1, 2]}, schema=schema))
    assert result.snapshot_ids == [1], "the commit is durable even though the Iceberg sync failed"
    assert table.to_arrow().num_rows == 2
    # the failure is counted, the lag shown, and the status command says why
    assert _sample("strata_iceberg_sync_failures_total", "db.blocked") == failures + 1
    assert _sample("strata_iceberg_sync_lag_snapshots", "db.blocked") == 1
    assert cli(["--warehouse", warehouse, "iceberg", "status", "db.blocked"]) == 1
    out = capsys.readouterr().out
    assert "latest snapshot 1; Iceberg metadata shows no Iceberg metadata; 1 snapshot(s) behind" in out
    assert "last failure" in out and "snapshot 1: " in out and "Error" in out, out
    monkeypatch.setattr(table.file_io, "write_bytes", write)  # the store takes writes again
    assert latest_metadata_location(table) is None
    assert cli(["--warehouse", warehouse, "iceberg", "sync", "db.blocked"]) == 0
    assert "snapshot 1" in capsys.readouterr().out
    assert_same(table, warehouse_options)
    assert cli(["--warehouse", warehouse, "iceberg", "sync", "db.blocked"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert cli(["--warehouse", warehouse, "iceberg", "status", "db.blocked"]) == 0
    assert capsys.readouterr().out.splitlines() == ["table db.blocked: latest snapshot 1; Iceberg metadata shows "
                                                    "snapshot 1; up to date"]
    table.write(pa.table({"id": [3]}, schema=schema))
    assert _sample("strata_iceberg_sync_lag_snapshots", "db.blocked") == 0


def _sample(name: str, table: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, {"table": table}) or 0.0


def test_rollback_restarts_the_iceberg_history(catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    schema = pa.schema([("id", pa.int64())])
    table = catalog.create_table("db.rolled", schema, options=ICEBERG)
    for i in range(3):
        table.write(pa.table({"id": [i]}, schema=schema))
    table.rollback_to(1)
    table.write(pa.table({"id": [10]}, schema=schema))
    facts = assert_same(table, warehouse_options)
    assert rows(table.to_arrow()) == [(0,), (10,)]
    assert facts["current"] == 2


def test_hadoop_catalog_storage(catalog: strata.Catalog, warehouse: str, warehouse_options: dict[str, str]) -> None:
    schema = pa.schema([("id", pa.int64())])
    table = catalog.create_table("db.hadoop", schema, options={"metadata.iceberg.storage": "hadoop-catalog"})
    table.write(pa.table({"id": [1]}, schema=schema))
    location = latest_metadata_location(table) or ""
    # the first rows get statistics, published as v1's statistics version (v1.metadata.json stays as written)
    assert location.removeprefix("file://") == f"{warehouse}/iceberg/db/hadoop/metadata/v1.stats.metadata.json"
    assert table.file_io.exists(f"{warehouse}/iceberg/db/hadoop/metadata/v1.metadata.json")
    assert_same(table, warehouse_options)


def test_options_are_validated(catalog: strata.Catalog) -> None:
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(OptionError, match=r"metadata\.iceberg\.storage"):
        catalog.create_table("db.bad", schema, options={"metadata.iceberg.storage": "hive-metastore"})
    with pytest.raises(OptionError, match=r"metadata\.iceberg\.format-version"):
        catalog.create_table("db.bad", schema, options={**ICEBERG, "metadata.iceberg.format-version": "4"})
    table = catalog.create_table("db.off", schema)
    table.write(pa.table({"id": [1]}, schema=schema))
    assert latest_metadata_location(table) is None
    assert IcebergSync(table).sync().snapshot_id == 1  # an explicit sync works whatever the option


@pytest.mark.parametrize("codec", ["snappy", "deflate", "zstd", "none"])
@pytest.mark.local_storage_only(reason="an in-memory codec round trip")
def test_manifest_list_codecs_round_trip(codec: str) -> None:
    manifests = [ManifestFile(f"s3://b/m{i}.avro", 100 + i, i % 2, 7, 5, 7, 3, 1, 30, 10, []) for i in range(50)]
    data = encode_manifest_list(manifests, 7, 6, 7, codec)
    assert decode_manifest_list(data, "list") == manifests


def _footer_layout(table: Table, path: str) -> dict[str, Any]:
    """Column sizes by field id and row-group offsets, summed from the file's footer with pyarrow."""
    with table.file_io.open_input_file(path) as f:
        meta = pq.ParquetFile(f).metadata
    ids = {fd.name: fd.id for fd in table.schema.fields}
    sizes: dict[str, int] = {}
    offsets = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        first = group.column(0)
        offsets.append(first.dictionary_page_offset if first.has_dictionary_page else first.data_page_offset)
        for c in range(group.num_columns):
            name = group.column(c).path_in_schema
            if name in ids:
                sizes[str(ids[name])] = sizes.get(str(ids[name]), 0) + group.column(c).total_compressed_size
    return {"column_sizes": sizes, "split_offsets": offsets}


def test_manifests_carry_column_sizes_and_split_offsets(catalog: strata.Catalog, warehouse_options: dict[str, str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Each data file's column sizes and row-group offsets, as its footer gives them, reach an
    Iceberg reader (Trino sizes VARCHAR columns from them); a rewrite of the manifests (the
    compaction's snapshot) carries them on without reading a footer again."""
    monkeypatch.setattr(data_file_writer, "ROW_GROUP_BYTES", 1)  # 32k-row groups: several per file
    monkeypatch.setattr(layout_module, "SPLIT_UNIT_BYTES", 1)  # each group a split unit of its own
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    table = catalog.create_table("db.layout", schema, options={**ICEBERG, "bucket": "1", "bucket-key": "id"})
    for start in (0, 70_000):
        table.write(pa.table({"id": range(start, start + 70_000),
                              "name": [f"n{i}" * (1 + i % 5) for i in range(start, start + 70_000)]}, schema=schema))
    _, facts = iceberg(table, warehouse_options)
    layouts = facts["layouts"]
    assert len(layouts) == 2
    for path, layout in layouts.items():
        assert {k: layout[k] for k in ("column_sizes", "split_offsets")} == _footer_layout(table, path)
        assert len(layout["split_offsets"]) == 3 and layout["value_counts"] == {"0": 70_000, "1": 70_000}

    footers_read: list[str] = []
    monkeypatch.setattr(sync_module, "read_layouts",
                        lambda io, paths: footers_read.extend(paths) or read_layouts(io, paths))
    table.write(pa.table({"id": [1], "name": ["x"]}, schema=schema))  # an APPEND: only its own footer
    assert len(footers_read) == 1
    table.compact(full=True)  # a rewrite: the compacted file's footer is new, nothing else is read
    assert len(footers_read) == 2
    _, facts = iceberg(table, warehouse_options)
    ((path, layout),) = facts["layouts"].items()
    assert footers_read[-1] == path and layout["column_sizes"] == _footer_layout(table, path)["column_sizes"]


def test_split_units_join_row_groups_up_to_a_peer_writers_group_size() -> None:
    """Row groups smaller than other writers' are listed as split offsets only where a unit of
    at most SPLIT_UNIT_BYTES starts: a reader plans about as many splits as for a peer's file."""
    mb = 1024 * 1024
    assert split_units([(4, 40 * mb), (40 * mb + 4, 40 * mb), (80 * mb + 4, 40 * mb)]) == [4]
    assert split_units([(4, 60 * mb), (60 * mb + 4, 60 * mb), (120 * mb + 4, 60 * mb)]) == [4, 120 * mb + 4]
    assert split_units([(4, 200 * mb), (200 * mb + 4, 10 * mb), (210 * mb + 4, 10 * mb)]) == [4, 200 * mb + 4]
    assert split_units([(4, 10)]) == [4] and split_units([]) == []
