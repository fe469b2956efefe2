"""Runs under pypaimon 2.1.0 (its own venv; see pypaimon_oracle.py), never under Strata's.

``create WAREHOUSE`` makes three small tables and then dumps; ``dump WAREHOUSE`` only dumps. The
dump is JSON: for every file in each table's manifest/ folder, pypaimon's own reading of it
(field names as in strata.manifest, bytes as hex), plus the live data files of the latest
snapshot as pypaimon's scan computes them.
"""

import json
import os
import sys

import pyarrow as pa
from pypaimon import CatalogFactory, Schema
from pypaimon.manifest.index_manifest_file import IndexManifestFile
from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.table.row.generic_row import GenericRowSerializer

TABLES = ("t", "d", "e")


def write(table, columns, schema, overwrite=None):
    builder = table.new_batch_write_builder()
    if overwrite is not None:
        builder = builder.overwrite(overwrite)
    writer, committer = builder.new_write(), builder.new_commit()
    writer.write_arrow(pa.Table.from_pydict(columns, schema=schema))
    committer.commit(writer.prepare_commit())
    writer.close()
    committer.close()


def create_pk_tables(catalog):
    """t: fixed 2 buckets, partitioned; d: dynamic bucket (HASH index). Two commits each."""
    kv = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("dt", pa.string(), nullable=False), pa.field("v", pa.string())])
    for name, bucket in (("t", "2"), ("d", "-1")):
        catalog.create_table(f"db.{name}", Schema.from_pyarrow_schema(
            kv, partition_keys=["dt"], primary_keys=["id", "dt"], options={"bucket": bucket}), False)
        table = catalog.get_table(f"db.{name}")
        for ids in ([1, 2, 3, 4], [3, 4, 5, 6]):
            write(table, {"id": ids, "dt": ["a", "b"] * 2, "v": [f"x{i}" for i in ids]}, kv)
    # overwriting one partition writes DELETE entries for its old files
    write(catalog.get_table("db.t"), {"id": [7], "dt": ["a"], "v": ["y"]}, kv, overwrite={"dt": "a"})


def create_dv_table(catalog):
    """e: row-id deletes on a data-evolution table write a deletion-vector index."""
    from pypaimon.write.table_delete import TableDeleteByRowId

    plain = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
    catalog.create_table("db.e", Schema.from_pyarrow_schema(plain, options={
        "row-tracking.enabled": "true", "data-evolution.enabled": "true",
        "deletion-vectors.enabled": "true"}), False)
    table = catalog.get_table("db.e")
    write(table, {"id": list(range(10)), "v": ["a"] * 10}, plain)
    committer = table.new_batch_write_builder().new_commit()
    committer.commit(TableDeleteByRowId(table).delete([1, 3, 5]))
    committer.close()


def row(r):
    return GenericRowSerializer.to_bytes(r).hex()


def hexed(b):
    return None if b is None else bytes(b).hex()


def stats(s):
    return {"min_values": row(s.min_values), "max_values": row(s.max_values),
            "null_counts": s.null_counts}


def data_file(f):
    return {
        "file_name": f.file_name, "file_size": f.file_size, "row_count": f.row_count,
        "min_key": row(f.min_key), "max_key": row(f.max_key), "key_stats": stats(f.key_stats),
        "value_stats": stats(f.value_stats), "min_sequence_number": f.min_sequence_number,
        "max_sequence_number": f.max_sequence_number, "schema_id": f.schema_id,
        "level": f.level, "extra_files": list(f.extra_files),
        "creation_time": f.creation_time.get_millisecond() if f.creation_time else None,
        "delete_row_count": f.delete_row_count, "embedded_index": hexed(f.embedded_index),
        "file_source": f.file_source, "value_stats_cols": f.value_stats_cols,
        "external_path": f.external_path, "first_row_id": f.first_row_id,
        "write_cols": f.write_cols, "write_cols_sequences": f.write_cols_sequences}


def manifest_entry(e):
    return {"kind": e.kind, "partition": row(e.partition), "bucket": e.bucket,
            "total_buckets": e.total_buckets, "file": data_file(e.file)}


def manifest_meta(m):
    return {"file_name": m.file_name, "file_size": m.file_size,
            "num_added_files": m.num_added_files, "num_deleted_files": m.num_deleted_files,
            "partition_stats": stats(m.partition_stats), "schema_id": m.schema_id,
            "min_bucket": m.min_bucket, "max_bucket": m.max_bucket, "min_level": m.min_level,
            "max_level": m.max_level, "min_row_id": m.min_row_id, "max_row_id": m.max_row_id}


def global_index(g):
    if g is None:
        return None
    return {"row_range_start": g.row_range_start, "row_range_end": g.row_range_end,
            "index_field_id": g.index_field_id, "extra_field_ids": g.extra_field_ids,
            "index_meta": hexed(g.index_meta), "source_meta": hexed(g.source_meta)}


def index_entry(e):
    f = e.index_file
    dvs = None if f.dv_ranges is None else [
        {"data_file_name": d.data_file_name, "offset": d.offset, "length": d.length,
         "cardinality": d.cardinality} for d in f.dv_ranges.values()]
    return {"kind": e.kind, "partition": row(e.partition), "bucket": e.bucket,
            "index_type": f.index_type, "file_name": f.file_name, "file_size": f.file_size,
            "row_count": f.row_count, "dv_ranges": dvs, "external_path": f.external_path,
            "global_index": global_index(f.global_index_meta)}


def read_file(table, name):
    if name.startswith("index-manifest-"):
        return "index", [index_entry(e) for e in IndexManifestFile(table).read(name)]
    if name.startswith("manifest-list-"):
        return "list", [manifest_meta(m) for m in ManifestListManager(table).read(name)]
    entries = ManifestFileManager(table).read(name, drop_stats=False)
    return "manifest", [manifest_entry(e) for e in entries]


def live_files(table):
    snapshot = table.snapshot_manager().get_latest_snapshot()
    metas = ManifestListManager(table).read_all(snapshot)
    entries = ManifestFileManager(table).read_entries_parallel(metas, drop_stats=False)
    return sorted(e.file.file_name for e in entries)


def dump(catalog, warehouse):
    files, live = {}, {}
    for name in TABLES:
        table = catalog.get_table(f"db.{name}")
        folder = os.path.join(warehouse, "db.db", name, "manifest")
        files[name] = {f: read_file(table, f) for f in sorted(os.listdir(folder))}
        live[name] = live_files(table)
    return {"files": files, "live": live}


def main():
    mode, warehouse = sys.argv[1], sys.argv[2]
    catalog = CatalogFactory.create({"warehouse": warehouse})
    if mode == "create":
        catalog.create_database("db", True)
        create_pk_tables(catalog)
        create_dv_table(catalog)
    print(json.dumps(dump(catalog, warehouse)))


main()
