"""System tables: metadata of a table read as rows, as Paimon's ``t$snapshots``, ``t$files``...

``table.system_table("files")`` returns an Arrow table; ``catalog.get_table("db.t$files")``
returns a read-only ``strata.table.system_table.SystemTable`` whose ``to_arrow()`` / ``to_pandas()``
give the same rows (so ``strata read 'db.t$files'`` works too). The readers here take the table's
FileStore, so the Table facade can call them without a cycle. Names, column names, types and row order follow
Paimon's ``paimon-core/.../table/system/*Table.java``:

=============  ===================================================================================
snapshots      one row per live snapshot, oldest first
schemas        one row per schema version (fields, keys and options as flat JSON)
options        the table's options (latest schema), by key
files          the live data files of a snapshot (latest by default), stats evolved to the current
               schema: renamed columns under their new names, added ones all null
manifests      the manifest files of a snapshot (base, delta, then changelog)
partitions     per partition: records, bytes, files, last file creation time, bucket count
buckets        per (partition, bucket): records, bytes, files, last file creation time
tags           the tags, by name
branches       the branches (``branch/branch-<name>/``) and when each was created
consumers      the consumers (``consumer/consumer-<id>``) and the next snapshot each will read
table_indexes  the index files of a snapshot (latest by default), as its index manifest lists them:
               deletion-vector files with the range of each data file's vector, hash indexes...
audit_log      the table's rows with a leading ``rowkind`` (+I/-U/+U/-D): for primary-key tables
               the merged records of every key including deletes not yet compacted away (Paimon
               reads the table with ``forceKeepDelete``); append tables are all +I. With
               ``incremental_between=(start, end)``: every record of those snapshots' changes
ro             read-optimized: primary-key tables read only their top (fully compacted) level
=============  ===================================================================================

Times are TIMESTAMP(3) in the local time zone, as Paimon shows them (``commit_time`` of snapshot 5
is ``LocalDateTime.ofInstant(timeMillis, systemDefault)``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strata.errors import SchemaMismatchError, TableNotFoundError
from strata.expressions import Predicate
from strata.format import binary_row
from strata.io.paths import _java_float
from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.manifest_entry import ManifestEntry
from strata.scan.planner import DataSplit, TableScan
from strata.schema.types import DataType
from strata.store import FileStore, HasStore, store_of
from strata.table.read import ROW_KIND_COLUMN, TableRead, read_arrow, read_changes

if TYPE_CHECKING:
    from strata.snapshot.snapshot import Snapshot

ROW_KIND = "rowkind"

_STR = pa.string()
_TS = pa.timestamp("ms")


def _f(name: str, t: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, t, nullable=nullable)


SNAPSHOTS = pa.schema([
    _f("snapshot_id", pa.int64(), False), _f("schema_id", pa.int64(), False),
    _f("commit_user", _STR, False), _f("commit_identifier", pa.int64(), False),
    _f("commit_kind", _STR, False), _f("commit_time", _TS, False),
    _f("base_manifest_list", _STR, False), _f("delta_manifest_list", _STR, False),
    _f("changelog_manifest_list", _STR), _f("total_record_count", pa.int64()),
    _f("delta_record_count", pa.int64()), _f("changelog_record_count", pa.int64()),
    _f("watermark", pa.int64()), _f("next_row_id", pa.int64()), _f("operation", _STR),
    _f("writer_version", _STR),
])
SCHEMAS = pa.schema([
    _f("schema_id", pa.int64(), False), _f("fields", _STR, False), _f("partition_keys", _STR, False),
    _f("primary_keys", _STR, False), _f("options", _STR, False), _f("comment", _STR),
    _f("update_time", _TS, False),
])
OPTIONS = pa.schema([_f("key", _STR, False), _f("value", _STR, False)])
FILES = pa.schema([
    _f("partition", _STR), _f("bucket", pa.int32(), False), _f("file_path", _STR, False),
    _f("file_format", _STR, False), _f("schema_id", pa.int64(), False), _f("level", pa.int32(), False),
    _f("record_count", pa.int64(), False), _f("file_size_in_bytes", pa.int64(), False),
    _f("min_key", _STR), _f("max_key", _STR), _f("null_value_counts", _STR, False),
    _f("min_value_stats", _STR, False), _f("max_value_stats", _STR, False),
    _f("min_sequence_number", pa.int64()), _f("max_sequence_number", pa.int64()),
    _f("creation_time", _TS), _f("deleteRowCount", pa.int64()), _f("file_source", _STR),
    _f("first_row_id", pa.int64()), _f("write_cols", pa.list_(_STR)),
])
MANIFESTS = pa.schema([
    _f("file_name", _STR, False), _f("file_size", pa.int64(), False),
    _f("num_added_files", pa.int64(), False), _f("num_deleted_files", pa.int64(), False),
    _f("schema_id", pa.int64(), False), _f("min_partition_stats", _STR), _f("max_partition_stats", _STR),
    _f("min_row_id", pa.int64()), _f("max_row_id", pa.int64()),
])
PARTITIONS = pa.schema([
    _f("partition", _STR), _f("record_count", pa.int64(), False), _f("file_size_in_bytes", pa.int64(), False),
    _f("file_count", pa.int64(), False), _f("last_update_time", _TS), _f("created_at", _TS),
    _f("created_by", _STR), _f("updated_by", _STR), _f("options", _STR),
    _f("total_buckets", pa.int32(), False), _f("done", pa.bool_(), False),
    _f("deleted_record_count", pa.int64()),
])
BUCKETS = pa.schema([
    _f("partition", _STR), _f("bucket", pa.int32(), False), _f("record_count", pa.int64(), False),
    _f("file_size_in_bytes", pa.int64(), False), _f("file_count", pa.int64(), False),
    _f("last_update_time", _TS),
])
TAGS = pa.schema([
    _f("tag_name", _STR, False), _f("snapshot_id", pa.int64(), False), _f("schema_id", pa.int64(), False),
    _f("commit_time", _TS, False), _f("record_count", pa.int64()), _f("create_time", _TS),
    _f("time_retained", _STR),
])
CONSUMERS = pa.schema([_f("consumer_id", _STR, False), _f("next_snapshot_id", pa.int64(), False)])
BRANCHES = pa.schema([_f("branch_name", _STR, False), _f("create_time", _TS, False)])  # BranchesTable
# TableIndexesTable.TABLE_TYPE; dv_ranges holds DeletionVectorMeta.SCHEMA rows (data file, offset,
# length, cardinality), as the index manifest does
DV_RANGE = pa.struct([_f("f0", _STR, False), _f("f1", pa.int32(), False), _f("f2", pa.int32(), False),
                      _f("_CARDINALITY", pa.int64())])
TABLE_INDEXES = pa.schema([
    _f("partition", _STR), _f("bucket", pa.int32(), False), _f("index_type", _STR, False),
    _f("file_name", _STR, False), _f("file_size", pa.int64(), False), _f("row_count", pa.int64(), False),
    _f("dv_ranges", pa.list_(DV_RANGE)), _f("row_range_start", pa.int64()), _f("row_range_end", pa.int64()),
    _f("index_field_id", pa.int32()), _f("index_field_name", _STR),
])

_FIXED_SCHEMAS = {"snapshots": SNAPSHOTS, "schemas": SCHEMAS, "options": OPTIONS, "files": FILES,
                  "manifests": MANIFESTS, "partitions": PARTITIONS, "buckets": BUCKETS, "tags": TAGS,
                  "consumers": CONSUMERS, "table_indexes": TABLE_INDEXES, "branches": BRANCHES}
SYSTEM_TABLES = (*_FIXED_SCHEMAS, "audit_log", "ro")


def check_name(store: FileStore, name: str) -> str:
    """`name` as the key of one of the system tables, else TableNotFoundError naming them."""
    key = name.lower()
    if key not in SYSTEM_TABLES:
        raise TableNotFoundError(f"table {store.identifier} has no system table {name!r}; system tables are "
                                 f"{', '.join(SYSTEM_TABLES)}")
    return key


def system_table_schema(table: FileStore | HasStore, name: str) -> pa.Schema:
    """The Arrow schema of a system table of `table` (a FileStore or the Table built on one)."""
    store = store_of(table)
    key = check_name(store, name)
    data = store.schema.arrow_schema()
    if key == "ro":
        return data
    if key == "audit_log":
        return pa.schema([_f(ROW_KIND, _STR, False), *data])
    return _FIXED_SCHEMAS[key]


def read_system_table(table: FileStore | HasStore, name: str, columns: Sequence[str] | None = None,
                      filter: Predicate | None = None, snapshot_id: int | None = None,
                      timestamp_millis: int | None = None, tag: str | None = None,
                      incremental_between: tuple[int, int] | None = None) -> pa.Table:
    """The rows of system table `name` of `table` (a FileStore or the Table built on one),
    optionally projected and filtered; the
    snapshot options pick what files/manifests/partitions/buckets/audit_log/ro describe.
    `incremental_between=(start, end)` (audit_log only, Paimon's ``incremental-between``): the
    changes of snapshots (start, end] with their row kinds instead of the table's state."""
    store = store_of(table)
    key = check_name(store, name)
    if incremental_between is not None and key != "audit_log":
        raise ValueError(f"system table {key!r} does not take incremental_between (only audit_log does)")
    schema = system_table_schema(store, key)
    for column in columns or ():
        if column not in schema.names:
            raise SchemaMismatchError(f"system table {store.identifier}${key} has no column {column!r}; "
                                      f"columns are {schema.names}")
    at: dict[str, Any] = {"snapshot_id": snapshot_id, "timestamp_millis": timestamp_millis, "tag": tag}
    if key == "ro":
        return read_arrow(store, columns, filter, read_optimized=True, **at)
    if key == "audit_log" and incremental_between is not None:
        start, end = incremental_between
        changes = read_changes(store, start, end)
        data = pa.Table.from_arrays(changes.columns, schema=schema)
    elif key == "audit_log":
        data = _audit_log(store, filter, **at)
    else:
        if key not in _AT_SNAPSHOT and any(v is not None for v in at.values()):
            raise ValueError(f"system table {key!r} does not take a snapshot, timestamp or tag")
        builder: Callable[..., list[dict[str, Any]]] = _BUILDERS[key]
        rows = builder(store, **at) if key in _AT_SNAPSHOT else builder(store)
        data = pa.Table.from_pylist(rows, schema=schema)
    if filter is not None:
        data = data.filter(filter.to_arrow())
    return data.select(list(columns)) if columns is not None else data


# -- helpers -----------------------------------------------------------------------------------------


def _local(epoch_millis: int | None) -> dt.datetime | None:
    """Epoch millis -> the local wall-clock time (naive), as Java's LocalDateTime.ofInstant."""
    if epoch_millis is None:
        return None
    seconds, millis = divmod(int(epoch_millis), 1000)
    return dt.datetime.fromtimestamp(seconds).replace(microsecond=millis * 1000)


def _wall(raw_millis: int | None) -> dt.datetime | None:
    """A TIMESTAMP(3) stored as local wall-clock millis (``_CREATION_TIME``) -> naive datetime."""
    if raw_millis is None:
        return None
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=int(raw_millis))


def java_string(value: Any, dtype: DataType | None = None) -> str:
    """A value as Paimon's cast to STRING prints it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_float(value, single=dtype is not None and dtype.root == "FLOAT")
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        return text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        text = value.strftime("%H:%M:%S")
        return text + (f".{value.microsecond // 1000:03d}" if value.microsecond else "")
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _decode_row(data: bytes, types: Sequence[pa.DataType]) -> list[Any] | None:
    """A serialized BinaryRow of the expected arity, else None (e.g. no stats were collected)."""
    if len(data) < 4 or int.from_bytes(data[:4], "big") != len(types):
        return None
    return binary_row.deserialize(data, list(types))


def _row_string(values: Sequence[Any] | None, dtypes: Sequence[DataType]) -> str | None:
    """Paimon's ROW -> STRING cast: ``{v1, v2}``."""
    if values is None:
        return None
    return "{" + ", ".join(java_string(v, t) for v, t in zip(values, dtypes, strict=True)) + "}"


def _flat_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _snapshot_at(store: FileStore, snapshot_id: int | None, timestamp_millis: int | None,
                 tag: str | None) -> Snapshot | None:
    return TableScan(store, snapshot_id, timestamp_millis, tag).snapshot()


def _splits(store: FileStore, snapshot_id: int | None, timestamp_millis: int | None,
            tag: str | None) -> list[DataSplit]:
    return TableScan(store, snapshot_id, timestamp_millis, tag).plan().splits


# -- builders ------------------------------------------------------------------------------------------


def _snapshots(store: FileStore) -> list[dict[str, Any]]:
    return [{
        "snapshot_id": s.id, "schema_id": s.schema_id, "commit_user": s.commit_user,
        "commit_identifier": s.commit_identifier, "commit_kind": s.commit_kind,
        "commit_time": _local(s.time_millis), "base_manifest_list": s.base_manifest_list,
        "delta_manifest_list": s.delta_manifest_list, "changelog_manifest_list": s.changelog_manifest_list,
        "total_record_count": s.total_record_count, "delta_record_count": s.delta_record_count,
        "changelog_record_count": s.changelog_record_count, "watermark": s.watermark,
        "next_row_id": s.next_row_id, "operation": _opt_str(s.extra.get("operation")),
        "writer_version": _opt_str(s.extra.get("writerVersion")),
    } for s in store.snapshot_manager.snapshots()]


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _schemas(store: FileStore) -> list[dict[str, Any]]:
    manager = store.schema_manager
    rows = []
    for schema_id in manager.list_ids():
        s = manager.schema(schema_id)
        rows.append({
            "schema_id": s.id, "fields": _flat_json([f.to_json() for f in s.fields]),
            "partition_keys": _flat_json(s.partition_keys), "primary_keys": _flat_json(s.primary_keys),
            "options": _flat_json(s.options), "comment": s.comment, "update_time": _local(s.time_millis),
        })
    return rows


def _options(store: FileStore) -> list[dict[str, Any]]:
    return [{"key": k, "value": v} for k, v in sorted(store.schema.options.items())]


class _FileStats:
    """Value stats of files, evolved to the table's current schema (FilesTable's StatsLazyGetter)."""

    def __init__(self, store: FileStore):
        self.store = store
        self.current = sorted(store.schema.fields, key=lambda f: f.name)  # Java prints a TreeMap
        self._keys: dict[int, tuple[list[pa.DataType], list[DataType]]] = {}

    def key_types(self, schema_id: int) -> tuple[list[pa.DataType], list[DataType]]:
        if schema_id not in self._keys:
            fields = self.store.schema_at(schema_id).key_fields() if self.store.schema.primary_keys else []
            self._keys[schema_id] = ([f.type.to_arrow() for f in fields], [f.type for f in fields])
        return self._keys[schema_id]

    def key_string(self, key: bytes, schema_id: int) -> str | None:
        arrow_types, dtypes = self.key_types(schema_id)
        if not arrow_types:
            return None
        values = _decode_row(key, arrow_types)
        if values is None:
            return None
        return "[" + ", ".join(java_string(v, t) for v, t in zip(values, dtypes, strict=True)) + "]"

    def value_stats(self, f: DataFileMeta) -> tuple[str, str, str]:
        schema = self.store.schema_at(f.schema_id)
        names = f.value_stats_cols if f.value_stats_cols is not None else schema.field_names
        by_name = {fld.name: fld for fld in schema.fields}
        types = [by_name[n].type.to_arrow() for n in names]
        mins = _decode_row(f.value_stats.min_values, types) if names else []
        maxs = _decode_row(f.value_stats.max_values, types) if names else []
        nulls = f.value_stats.null_counts
        position = {by_name[n].id: i for i, n in enumerate(names)}
        file_ids = {fld.id for fld in schema.fields}
        null_parts, min_parts, max_parts = [], [], []
        for fld in self.current:
            i = position.get(fld.id)
            if fld.id not in file_ids:  # added later: every row of the file is null
                null_count: int | None = f.row_count
                lo = hi = None
            elif i is None:  # not collected (dense stats)
                null_count, lo, hi = None, None, None
            else:
                null_count = nulls[i] if i < len(nulls) else None
                lo = mins[i] if mins is not None else None
                hi = maxs[i] if maxs is not None else None
            null_parts.append(f"{fld.name}={java_string(null_count)}")
            min_parts.append(f"{fld.name}={java_string(lo, fld.type)}")
            max_parts.append(f"{fld.name}={java_string(hi, fld.type)}")
        return ("{" + ", ".join(null_parts) + "}", "{" + ", ".join(min_parts) + "}",
                "{" + ", ".join(max_parts) + "}")


def _partition_dtypes(store: FileStore) -> list[DataType]:
    return [f.type for f in store.schema.partition_fields()]


def _files(store: FileStore, snapshot_id: int | None = None, timestamp_millis: int | None = None,
           tag: str | None = None) -> list[dict[str, Any]]:
    dtypes = _partition_dtypes(store)
    stats = _FileStats(store)
    rows = []
    for split in _splits(store, snapshot_id, timestamp_millis, tag):
        partition = _row_string(split.partition_values, dtypes)
        for f in split.files:
            nulls, mins, maxs = stats.value_stats(f)
            rows.append({
                "partition": partition, "bucket": split.bucket,
                "file_path": split.file_path(f),
                "file_format": f.file_name.rsplit(".", 1)[-1] if "." in f.file_name else "",
                "schema_id": f.schema_id, "level": f.level, "record_count": f.row_count,
                "file_size_in_bytes": f.file_size, "min_key": stats.key_string(f.min_key, f.schema_id),
                "max_key": stats.key_string(f.max_key, f.schema_id), "null_value_counts": nulls,
                "min_value_stats": mins, "max_value_stats": maxs,
                "min_sequence_number": f.min_sequence_number, "max_sequence_number": f.max_sequence_number,
                "creation_time": _wall(f.creation_time), "deleteRowCount": f.delete_row_count,
                "file_source": f.file_source.name if f.file_source is not None else None,
                "first_row_id": f.first_row_id, "write_cols": f.write_cols,
            })
    return rows


def _manifests(store: FileStore, snapshot_id: int | None = None, timestamp_millis: int | None = None,
               tag: str | None = None) -> list[dict[str, Any]]:
    snapshot = _snapshot_at(store, snapshot_id, timestamp_millis, tag)
    if snapshot is None:
        return []
    manifests = store.manifest_store
    metas = manifests.read_manifest_list(snapshot.base_manifest_list) + \
        manifests.read_manifest_list(snapshot.delta_manifest_list)
    if snapshot.changelog_manifest_list:
        metas += manifests.read_manifest_list(snapshot.changelog_manifest_list)
    partition_fields = store.schema.partition_fields()
    arrow_types = [f.type.to_arrow() for f in partition_fields]
    dtypes = [f.type for f in partition_fields]
    rows = []
    for m in metas:
        rows.append({
            "file_name": m.file_name, "file_size": m.file_size, "num_added_files": m.num_added_files,
            "num_deleted_files": m.num_deleted_files, "schema_id": m.schema_id,
            "min_partition_stats": _row_string(_decode_row(m.partition_stats.min_values, arrow_types), dtypes),
            "max_partition_stats": _row_string(_decode_row(m.partition_stats.max_values, arrow_types), dtypes),
            "min_row_id": m.min_row_id, "max_row_id": m.max_row_id,
        })
    return rows


def _live_entries(store: FileStore, snapshot_id: int | None, timestamp_millis: int | None,
                  tag: str | None) -> list[ManifestEntry]:
    scan = TableScan(store, snapshot_id, timestamp_millis, tag)
    return scan.plan_entries(scan.snapshot())


def _partition_values(store: FileStore, partition: bytes) -> list[Any]:
    fields = store.schema.partition_fields()
    return binary_row.deserialize(partition, [f.type.to_arrow() for f in fields]) if fields else []


def _partitions(store: FileStore, snapshot_id: int | None = None, timestamp_millis: int | None = None,
                tag: str | None = None) -> list[dict[str, Any]]:
    grouped: dict[bytes, list[ManifestEntry]] = defaultdict(list)
    for e in _live_entries(store, snapshot_id, timestamp_millis, tag):
        grouped[e.partition].append(e)
    keys = store.schema.partition_keys
    dtypes = _partition_dtypes(store)
    default_name = str(store.core.get("partition.default-name"))
    rows = []
    for partition, entries in grouped.items():
        values = _partition_values(store, partition)
        spec = "/".join(f"{k}={default_name if v is None else java_string(v, t)}"
                        for k, v, t in zip(keys, values, dtypes, strict=True))
        times = [e.file.creation_time for e in entries if e.file.creation_time is not None]
        rows.append({
            "partition": spec, "record_count": sum(e.file.row_count for e in entries),
            "file_size_in_bytes": sum(e.file.file_size for e in entries), "file_count": len(entries),
            "last_update_time": _wall(max(times)) if times else None, "created_at": None,
            "created_by": None, "updated_by": None, "options": None,
            "total_buckets": entries[0].total_buckets, "done": False, "deleted_record_count": 0,
        })
    return sorted(rows, key=lambda r: r["partition"])


def _buckets(store: FileStore, snapshot_id: int | None = None, timestamp_millis: int | None = None,
             tag: str | None = None) -> list[dict[str, Any]]:
    grouped: dict[tuple[bytes, int], list[ManifestEntry]] = defaultdict(list)
    for e in _live_entries(store, snapshot_id, timestamp_millis, tag):
        grouped[(e.partition, e.bucket)].append(e)
    dtypes = _partition_dtypes(store)
    rows = []
    for (partition, bucket), entries in grouped.items():
        times = [e.file.creation_time for e in entries if e.file.creation_time is not None]
        rows.append({
            "partition": _row_string(_partition_values(store, partition), dtypes), "bucket": bucket,
            "record_count": sum(e.file.row_count for e in entries),
            "file_size_in_bytes": sum(e.file.file_size for e in entries), "file_count": len(entries),
            "last_update_time": _wall(max(times)) if times else None,
        })
    return sorted(rows, key=lambda r: (r["partition"], r["bucket"]))


def _branches(store: FileStore) -> list[dict[str, Any]]:
    return [{"branch_name": b.name, "create_time": b.create_time} for b in store.branches.infos()]


def _tags(store: FileStore) -> list[dict[str, Any]]:
    rows = []
    for info in sorted(store.tags.list_all(), key=lambda t: t.name):
        tag = info.snapshot
        rows.append({
            "tag_name": info.name, "snapshot_id": tag.id, "schema_id": tag.schema_id,
            "commit_time": _local(tag.time_millis), "record_count": tag.total_record_count,
            "create_time": info.create_time, "time_retained": java_duration(info.time_retained_ms),
        })
    return rows


def java_duration(millis: int | None) -> str | None:
    """Java's Duration.toString: ``PT1H``, ``PT168H``, ``PT1M30S``, ``PT0.5S``."""
    if millis is None:
        return None
    if millis == 0:
        return "PT0S"
    sign = "-" if millis < 0 else ""
    hours, rest = divmod(abs(millis), 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = "PT"
    if hours:
        text += f"{sign}{hours}H"
    if minutes:
        text += f"{sign}{minutes}M"
    if rest:
        seconds = format(Decimal(rest) / 1000, "f").rstrip("0").rstrip(".")
        text += f"{sign}{seconds}S"
    return text


def _consumers(store: FileStore) -> list[dict[str, Any]]:
    return [{"consumer_id": c.consumer_id, "next_snapshot_id": c.next_snapshot}
            for c in sorted(store.consumers.list_all(), key=lambda c: c.consumer_id)]


def _table_indexes(store: FileStore, snapshot_id: int | None = None, timestamp_millis: int | None = None,
                   tag: str | None = None) -> list[dict[str, Any]]:
    """The entries of the snapshot's index manifest, in its order (TableIndexesTable)."""
    snapshot = _snapshot_at(store, snapshot_id, timestamp_millis, tag)
    if snapshot is None or snapshot.index_manifest is None:
        return []
    dtypes = _partition_dtypes(store)
    names = {f.id: f.name for f in store.schema.fields}
    rows = []
    for e in store.manifest_store.read_index_manifest(snapshot.index_manifest):
        ranges = None if e.dv_ranges is None else [
            {"f0": r.data_file_name, "f1": r.offset, "f2": r.length, "_CARDINALITY": r.cardinality}
            for r in e.dv_ranges]
        g = e.global_index
        field_name = None
        if g is not None:
            ids = g.extra_field_ids if g.extra_field_ids else [g.index_field_id]
            if all(i in names for i in ids):
                field_name = ",".join(names[i] for i in ids)
        rows.append({
            "partition": _row_string(_partition_values(store, e.partition), dtypes), "bucket": e.bucket,
            "index_type": e.index_type, "file_name": e.file_name, "file_size": e.file_size,
            "row_count": e.row_count, "dv_ranges": ranges,
            "row_range_start": g.row_range_start if g is not None else None,
            "row_range_end": g.row_range_end if g is not None else None,
            "index_field_id": g.index_field_id if g is not None else None, "index_field_name": field_name,
        })
    return rows


_BUILDERS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "snapshots": _snapshots, "schemas": _schemas, "options": _options, "files": _files,
    "manifests": _manifests, "partitions": _partitions, "buckets": _buckets, "tags": _tags,
    "consumers": _consumers, "table_indexes": _table_indexes, "branches": _branches,
}
_AT_SNAPSHOT = ("files", "manifests", "partitions", "buckets", "table_indexes")


# -- audit log ---------------------------------------------------------------------------------------


class _AuditLogRead(TableRead):
    """Reads like a normal batch read (merging primary-key buckets) but keeps every merged record
    with its row kind, deletes included (Paimon's ``forceKeepDelete``)."""

    def _labels_kinds(self, split: DataSplit) -> bool:
        return True


def _audit_log(store: FileStore, filter: Predicate | None, snapshot_id: int | None,
               timestamp_millis: int | None, tag: str | None) -> pa.Table:
    names = set(store.schema.field_names)
    pushed = filter if filter is not None and filter.fields() <= names else None
    splits = TableScan(store, snapshot_id, timestamp_millis, tag, pushed).plan().splits
    read = _AuditLogRead(store, None, pushed)
    tables = [t for s in splits for t in read.read_split(s)]
    schema = system_table_schema(store, "audit_log")
    if not tables:
        return schema.empty_table()
    data = pa.concat_tables(tables)
    assert data.column_names[0] == ROW_KIND_COLUMN
    return pa.Table.from_arrays(data.columns, schema=schema)
