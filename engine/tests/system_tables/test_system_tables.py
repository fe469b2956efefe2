"""System tables ($snapshots, $schemas, $options, $files, $manifests, $partitions, $buckets, $tags,
$consumers, $audit_log, $ro): each one's rows match what the engine knows, through
table.system_table(name) and catalog.get_table('db.t$name')."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

import strata
from strata import SchemaChange, col
from strata.errors import TableNotFoundError
from strata.table.system_table import ReadOnlyTableError, SystemTable
from strata.table.system_tables import SYSTEM_TABLES, java_duration, java_string, system_table_schema

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.int32()), ("name", pa.string())])


def _data(ids: list[int], dt_values: tuple[str, ...] = ("2024-01-01", "2024-01-02"), v: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "dt": [dt_values[i % len(dt_values)] for i in ids],
                     "v": pa.array([i + v for i in ids], pa.int32()), "name": [f"n{i}" for i in ids]})


@pytest.fixture
def pk(catalog: strata.Catalog) -> strata.Table:
    t = catalog.create_table("db.pk", SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                             options={"bucket": "2", "snapshot.num-retained.min": "20"})
    t.write(_data(list(range(10))))
    t.write(_data([1, 2, 3], v=100), row_kind="+U")
    t.delete(_data([4, 5]))
    return t


@pytest.fixture
def append(catalog: strata.Catalog) -> strata.Table:
    t = catalog.create_table("db.ap", SCHEMA, partition_keys=["dt"])
    t.write(_data(list(range(6))))
    t.write(_data(list(range(6, 9))))
    return t


def test_every_system_table_has_its_schema(pk: strata.Table, append: strata.Table) -> None:
    for table in (pk, append):
        for name in SYSTEM_TABLES:
            data = table.system_table(name)
            assert data.schema == system_table_schema(table, name), name
            via_catalog = table.catalog.get_table(f"{table.identifier}${name}")  # type: ignore[union-attr]
            assert isinstance(via_catalog, SystemTable)
            assert via_catalog.to_arrow().equals(data), name


def test_snapshots(pk: strata.Table) -> None:
    rows = pk.system_table("snapshots").to_pylist()
    snapshots = pk.snapshots()
    assert [r["snapshot_id"] for r in rows] == [s.id for s in snapshots] == [1, 2, 3]
    for r, s in zip(rows, snapshots, strict=True):
        assert r["schema_id"] == s.schema_id
        assert r["commit_user"] == s.commit_user
        assert r["commit_identifier"] == s.commit_identifier
        assert r["commit_kind"] == s.commit_kind == "APPEND"
        assert r["commit_time"] == dt.datetime.fromtimestamp(s.time_millis / 1000).replace(
            microsecond=(s.time_millis % 1000) * 1000)
        assert r["base_manifest_list"] == s.base_manifest_list
        assert r["delta_manifest_list"] == s.delta_manifest_list
        assert r["changelog_manifest_list"] == s.changelog_manifest_list
        assert r["total_record_count"] == s.total_record_count
        assert r["delta_record_count"] == s.delta_record_count
        assert r["watermark"] == s.watermark
    assert [r["delta_record_count"] for r in rows] == [10, 3, 2]


def test_schemas_and_options(pk: strata.Table) -> None:
    t = pk.alter(SchemaChange.add_column("extra", "STRING", comment="added"),
                 SchemaChange.set_option("snapshot.num-retained.min", "30"))
    t = t.alter(SchemaChange.update_comment("hello"))
    rows = t.system_table("schemas").to_pylist()
    assert [r["schema_id"] for r in rows] == [0, 1, 2]
    for r in rows:
        schema = t.schema_manager.schema(r["schema_id"])
        assert json.loads(r["fields"]) == [f.to_json() for f in schema.fields]
        assert json.loads(r["partition_keys"]) == ["dt"]
        assert json.loads(r["primary_keys"]) == ["id", "dt"]
        assert json.loads(r["options"]) == schema.options
        assert r["comment"] == schema.comment
        assert isinstance(r["update_time"], dt.datetime)
    assert rows[1]["fields"].endswith('{"id":4,"name":"extra","type":"STRING","description":"added"}]')
    assert rows[2]["comment"] == "hello"
    options = t.system_table("options").to_pylist()
    assert options == [{"key": k, "value": v} for k, v in sorted(t.schema.options.items())]
    assert {"key": "snapshot.num-retained.min", "value": "30"} in options


def _scan_files(table: strata.Table, snapshot_id: int | None = None) -> set[tuple]:
    return {(f"{s.bucket_path}/{f.file_name}", s.bucket, f.level, f.row_count, f.file_size, f.schema_id,
             f.min_sequence_number, f.max_sequence_number)
            for s in table.scan(snapshot_id=snapshot_id) for f in s.files}


def _files_rows(table: strata.Table, **kwargs: int) -> set[tuple]:
    return {(r["file_path"], r["bucket"], r["level"], r["record_count"], r["file_size_in_bytes"], r["schema_id"],
             r["min_sequence_number"], r["max_sequence_number"])
            for r in table.system_table("files", **kwargs).to_pylist()}


def test_files_match_scan(pk: strata.Table, append: strata.Table) -> None:
    for table in (pk, append):
        assert _files_rows(table) == _scan_files(table)
        assert _files_rows(table, snapshot_id=1) == _scan_files(table, 1)
    rows = pk.system_table("files").to_pylist()
    assert {r["partition"] for r in rows} == {"{2024-01-01}", "{2024-01-02}"}
    assert {r["file_format"] for r in rows} == {"parquet"}
    assert {r["file_source"] for r in rows} == {"APPEND"}
    # PK files: min/max key as Java's Arrays.toString; the stats evolve with the schema
    first = next(r for r in rows if r["min_sequence_number"] == 0 and r["partition"] == "{2024-01-01}")
    assert first["min_key"].startswith("[") and first["max_key"].startswith("[")
    keys = sorted(int(r["min_key"][1:-1]) for r in rows)
    assert keys[0] == 0
    append_rows = append.system_table("files").to_pylist()
    assert all(r["min_key"] is None and r["max_key"] is None for r in append_rows)
    r0 = next(r for r in append_rows if r["partition"] == "{2024-01-01}" and r["min_sequence_number"] == 0)
    assert r0["null_value_counts"] == "{dt=0, id=0, name=0, v=0}"
    assert r0["min_value_stats"] == "{dt=2024-01-01, id=0, name=n0, v=0}"
    assert r0["max_value_stats"] == "{dt=2024-01-01, id=4, name=n4, v=4}"
    assert isinstance(r0["creation_time"], dt.datetime)


def test_files_stats_after_schema_change(append: strata.Table) -> None:
    t = append.alter(SchemaChange.rename_column("name", "label"), SchemaChange.add_column("w", "BIGINT"),
                     SchemaChange.update_column_type("v", "BIGINT"))
    rows = t.system_table("files").to_pylist()
    r0 = next(r for r in rows if r["partition"] == "{2024-01-01}" and r["min_sequence_number"] == 0)
    assert r0["schema_id"] == 0
    assert r0["min_value_stats"] == "{dt=2024-01-01, id=0, label=n0, v=0, w=null}"
    assert r0["null_value_counts"] == f"{{dt=0, id=0, label=0, v=0, w={r0['record_count']}}}"


def test_manifests(pk: strata.Table) -> None:
    rows = pk.system_table("manifests").to_pylist()
    snapshot = pk.latest_snapshot()
    assert snapshot is not None
    store = pk.manifest_store
    metas = store.read_manifest_list(snapshot.base_manifest_list) + store.read_manifest_list(
        snapshot.delta_manifest_list)
    assert [r["file_name"] for r in rows] == [m.file_name for m in metas]
    assert [r["file_size"] for r in rows] == [m.file_size for m in metas]
    live = sum(len(s.files) for s in pk.scan())
    assert sum(r["num_added_files"] - r["num_deleted_files"] for r in rows) == live
    assert {r["min_partition_stats"] for r in rows} <= {"{2024-01-01}", "{2024-01-02}"}
    assert rows[0]["max_partition_stats"] == "{2024-01-02}"
    assert [r["file_name"] for r in pk.system_table("manifests", snapshot_id=1).to_pylist()] == \
        [m.file_name for m in store.read_manifest_list(pk.snapshot_manager.snapshot(1).delta_manifest_list)]


def test_manifests_include_changelog(catalog: strata.Catalog) -> None:
    t = catalog.create_table("db.cl", SCHEMA, primary_keys=["id"],
                             options={"bucket": "1", "changelog-producer": "input"})
    t.write(_data([1, 2]))
    snapshot = t.latest_snapshot()
    assert snapshot is not None and snapshot.changelog_manifest_list
    names = [r["file_name"] for r in t.system_table("manifests").to_pylist()]
    changelog = [m.file_name for m in t.manifest_store.read_manifest_list(snapshot.changelog_manifest_list)]
    assert names[-len(changelog):] == changelog


def test_partitions_and_buckets(pk: strata.Table, append: strata.Table) -> None:
    for table in (pk, append):
        splits = table.scan()
        partitions = table.system_table("partitions").to_pylist()
        expect: dict[str, list] = {}
        for s in splits:
            key = f"dt={s.partition_values[0]}"
            entry = expect.setdefault(key, [0, 0, 0, s.total_buckets])
            entry[0] += sum(f.row_count for f in s.files)
            entry[1] += sum(f.file_size for f in s.files)
            entry[2] += len(s.files)
        assert [r["partition"] for r in partitions] == sorted(expect)
        for r in partitions:
            assert [r["record_count"], r["file_size_in_bytes"], r["file_count"], r["total_buckets"]] == \
                expect[r["partition"]]
            assert r["done"] is False and isinstance(r["last_update_time"], dt.datetime)
        buckets = table.system_table("buckets").to_pylist()
        assert [(r["partition"], r["bucket"]) for r in buckets] == sorted(
            (f"{{{s.partition_values[0]}}}", s.bucket) for s in splits)
        by_key = {(f"{{{s.partition_values[0]}}}", s.bucket): s for s in splits}
        for r in buckets:
            s = by_key[(r["partition"], r["bucket"])]
            assert r["record_count"] == sum(f.row_count for f in s.files)
            assert r["file_count"] == len(s.files)
            assert r["file_size_in_bytes"] == sum(f.file_size for f in s.files)
            assert r["last_update_time"] == max(dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=f.creation_time)
                                                for f in s.files if f.creation_time is not None)
    assert pk.system_table("partitions").column("total_buckets").to_pylist() == [2, 2]
    assert append.system_table("partitions").column("total_buckets").to_pylist() == [-1, -1]


def test_unpartitioned_partitions(catalog: strata.Catalog) -> None:
    t = catalog.create_table("db.flat", SCHEMA)
    t.write(_data([1, 2, 3]))
    assert t.system_table("partitions").select(["partition", "record_count"]).to_pylist() == \
        [{"partition": "", "record_count": 3}]
    assert t.system_table("buckets").select(["partition", "bucket"]).to_pylist() == [{"partition": "{}", "bucket": 0}]


def test_tags(pk: strata.Table) -> None:
    assert pk.system_table("tags").num_rows == 0
    pk.create_tag("first", snapshot_id=1)
    pk.create_tag("kept", snapshot_id=2, time_retained="2 h")
    rows = pk.system_table("tags").to_pylist()
    assert [r["tag_name"] for r in rows] == ["first", "kept"]
    assert [r["snapshot_id"] for r in rows] == [1, 2]
    s1, s2 = pk.snapshot_manager.snapshot(1), pk.snapshot_manager.snapshot(2)
    assert [r["record_count"] for r in rows] == [s1.total_record_count, s2.total_record_count]
    assert [r["schema_id"] for r in rows] == [0, 0]
    assert rows[0]["create_time"] is None and rows[0]["time_retained"] is None
    assert isinstance(rows[1]["create_time"], dt.datetime)
    assert rows[1]["time_retained"] == "PT2H"


def test_consumers(pk: strata.Table) -> None:
    assert pk.system_table("consumers").num_rows == 0
    pk.reset_consumer("reader-b", 3)
    pk.reset_consumer("reader-a", 2)
    assert pk.system_table("consumers").to_pylist() == [
        {"consumer_id": "reader-a", "next_snapshot_id": 2}, {"consumer_id": "reader-b", "next_snapshot_id": 3}]


def test_audit_log_primary_key(pk: strata.Table) -> None:
    audit = pk.system_table("audit_log")
    assert audit.column_names == ["rowkind", *pk.schema.field_names]
    kinds = {r["id"]: r["rowkind"] for r in audit.to_pylist()}
    # merged per key, with each key's latest kind; deleted keys show their -D until compaction drops it
    assert kinds == {0: "+I", 1: "+U", 2: "+U", 3: "+U", 4: "-D", 5: "-D", 6: "+I", 7: "+I", 8: "+I", 9: "+I"}
    live = audit.filter(pa.compute.is_in(audit.column("rowkind"), pa.array(["+I", "+U"]))).drop_columns(["rowkind"])
    assert sorted(live.to_pylist(), key=lambda r: r["id"]) == sorted(pk.to_arrow().to_pylist(), key=lambda r: r["id"])
    # filters on data columns and on rowkind, projection
    deleted = pk.system_table("audit_log", filter=col("rowkind") == "-D", columns=["id"])
    assert deleted.column_names == ["id"] and sorted(deleted.column("id").to_pylist()) == [4, 5]
    assert pk.system_table("audit_log", filter=col("v") >= 100).column("rowkind").to_pylist() == ["+U"] * 3
    # after a full compaction the deletes are gone
    pk.compact(full=True)
    assert set(pk.system_table("audit_log").column("rowkind").to_pylist()) == {"+I", "+U"}
    # time travel: as of snapshot 1 everything was an insert
    assert set(pk.system_table("audit_log", snapshot_id=1).column("rowkind").to_pylist()) == {"+I"}


def test_audit_log_append(append: strata.Table) -> None:
    audit = append.system_table("audit_log")
    assert set(audit.column("rowkind").to_pylist()) == {"+I"}
    assert audit.drop_columns(["rowkind"]).sort_by("id").equals(append.to_arrow().sort_by("id"))


def test_read_optimized(pk: strata.Table, append: strata.Table) -> None:
    assert pk.system_table("ro").num_rows == 0  # nothing fully compacted yet
    pk.compact(full=True)
    assert pk.system_table("ro").sort_by("id").equals(pk.to_arrow().sort_by("id"))
    assert append.system_table("ro").sort_by("id").equals(append.to_arrow().sort_by("id"))
    assert pk.system_table("ro", columns=["id"], filter=col("id") < 3).sort_by("id").column("id").to_pylist() == \
        [0, 1, 2]


def test_get_table_with_suffix(catalog: strata.Catalog, pk: strata.Table) -> None:
    snap = catalog.get_table("db.pk$snapshots")
    assert isinstance(snap, SystemTable) and str(snap.identifier) == "db.pk$snapshots"
    assert snap.to_arrow().equals(pk.system_table("snapshots"))
    df = snap.to_pandas()
    assert list(df["snapshot_id"]) == [1, 2, 3]
    assert snap.to_arrow(columns=["snapshot_id", "commit_kind"], filter=col("snapshot_id") >= 2).to_pylist() == [
        {"snapshot_id": 2, "commit_kind": "APPEND"}, {"snapshot_id": 3, "commit_kind": "APPEND"}]
    assert snap.schema.field_names == system_table_schema(pk, "snapshots").names
    files = catalog.get_table("db.pk$FILES")  # case-insensitive, as Paimon
    assert files.to_arrow(snapshot_id=1).num_rows == len(_scan_files(pk, 1))
    with pytest.raises(TableNotFoundError, match="no system table 'nope'"):
        catalog.get_table("db.pk$nope")
    with pytest.raises(TableNotFoundError):
        catalog.get_table("db.missing$snapshots")
    with pytest.raises(ReadOnlyTableError, match="read-only"):
        snap.write(_data([1]))
    with pytest.raises(ReadOnlyTableError):
        snap.compact()
    with pytest.raises(ReadOnlyTableError):
        snap.rollback_to(1)
    with pytest.raises(ValueError, match="does not take a snapshot"):
        pk.system_table("snapshots", snapshot_id=1)
    with pytest.raises(ValueError, match="no column 'nope'"):
        pk.system_table("options", columns=["nope"])


def test_jdbc_catalog_system_tables(warehouse, warehouse_options, tmp_path) -> None:
    catalog = strata.load_catalog(warehouse, metastore="jdbc", uri=f"sqlite:///{tmp_path}/catalog.sqlite",
                                  **warehouse_options)
    catalog.create_database("db")
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    t.write(_data([1, 2]))
    assert catalog.get_table("db.t$snapshots").to_arrow().column("snapshot_id").to_pylist() == [1]
    assert catalog.get_table("db.t$audit_log").to_arrow().num_rows == 2


def test_value_formatting() -> None:
    assert java_string(None) == "null"
    assert java_string(True) == "true"
    assert java_string(Decimal("1.50")) == "1.50"
    assert java_string(dt.date(2024, 1, 2)) == "2024-01-02"
    assert java_string(dt.datetime(2024, 1, 2, 3, 4, 5, 120000)) == "2024-01-02 03:04:05.12"
    assert java_string(1.0) == "1.0"
    assert java_string(b"ab") == "ab"
    assert java_duration(3_600_000) == "PT1H"
    assert java_duration(90_500) == "PT1M30.5S"
    assert java_duration(7 * 24 * 3_600_000) == "PT168H"
    assert java_duration(0) == "PT0S"


def test_audit_log_incremental(pk: strata.Table) -> None:
    """incremental_between=(start, end): the changes of those snapshots, every record with its kind."""
    changes = pk.system_table("audit_log", incremental_between=(1, 3))
    assert changes.column_names[0] == "rowkind"
    assert sorted(zip(changes.column("rowkind").to_pylist(), changes.column("id").to_pylist(), strict=True)) == \
        [("+U", 1), ("+U", 2), ("+U", 3), ("-D", 4), ("-D", 5)]
    assert changes.drop_columns(["rowkind"]).equals(pk.read_incremental(1, 3).drop_columns(["_ROW_KIND"]))
    everything = pk.system_table("audit_log", incremental_between=(0, 3))
    assert everything.num_rows == 15
    with pytest.raises(ValueError, match="incremental_between"):
        pk.system_table("files", incremental_between=(0, 1))
