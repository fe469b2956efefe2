"""Iceberg manifests and manifest lists (format version 2 or 3) as Avro files with field ids.

Iceberg readers resolve Avro fields by their ``field-id``, so every field carries the id the
Iceberg spec gives it; maps with non-string keys are arrays of key/value records marked
``logicalType: map``. Format 3 adds the row-lineage field ``first_row_id`` (manifest lists and
data files) and the deletion-vector fields ``content_offset`` / ``content_size_in_bytes``.

Format-2 position deletes are written as ``position_delete_file`` lays them out, so that a reader
(Trino 476, whose planning and per-split reading of deletes the layout follows) skips what it can:
one delete file per data file, positions sorted, ``referenced_data_file`` set and exact
``file_path`` bounds (either pairs the file with that one data file at planning), ``pos`` bounds
(a split whose row range misses them skips the file without opening it) and zero null counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from strata.fs import FileIO
from strata.fs.decoded_cache import DecodedFileCache
from strata.iceberg.types import avro_partition_type, avro_partition_value, bound_bytes, from_bound_bytes
from strata.manifest.avro_container import read_container, strip_logical_types, write_container
from strata.manifest.simple_stats import in_bounds

DATA, DELETES = 0, 1  # manifest / file content
EXISTING, ADDED, DELETED = 0, 1, 2  # entry status
FORMAT_VERSION = 2  # the default; 3 adds row lineage and deletion vectors
FORMAT_VERSIONS = (2, 3)
DECODED_ENTRIES = DecodedFileCache(max_weight=500_000)  # manifest path -> its entries (read_entries)
LIVE_PATHS = DecodedFileCache(max_weight=500_000)  # manifest path -> its files' paths (live_paths)
FILE_PATH_ID, POS_ID = 2147483546, 2147483545  # position-delete file columns (reserved ids)
POSITION_DELETE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()})])


@dataclass(frozen=True)
class PartitionField:
    name: str
    source_id: int
    field_id: int
    iceberg_type: str


@dataclass
class DataFile:
    """One Iceberg ``data_file``: a data file, or position deletes (content 1): a Parquet
position-delete file, or (format 3) a deletion vector, a blob of a Puffin file."""

    content: int
    path: str
    partition: tuple[Any, ...]  # physical values, in spec order
    record_count: int
    file_size: int
    null_counts: dict[int, int] = field(default_factory=dict)
    lower_bounds: dict[int, bytes] = field(default_factory=dict)
    upper_bounds: dict[int, bytes] = field(default_factory=dict)
    referenced_data_file: str | None = None
    file_format: str = "PARQUET"
    first_row_id: int | None = None  # format 3; None: inherited from the manifest's first_row_id
    content_offset: int | None = None  # format 3 deletion vectors: the blob within the Puffin file
    content_size: int | None = None
    column_sizes: dict[int, int] = field(default_factory=dict)  # from the footer (strata.iceberg.layout)
    value_counts: dict[int, int] = field(default_factory=dict)
    split_offsets: list[int] | None = None


@dataclass
class Entry:
    status: int
    snapshot_id: int
    sequence_number: int
    file: DataFile


@dataclass
class ManifestFile:
    """One manifest-list row."""

    path: str
    length: int
    content: int
    sequence_number: int
    min_sequence_number: int
    added_snapshot_id: int
    added_files: int
    existing_files: int
    added_rows: int
    existing_rows: int
    partitions: list[dict[str, Any]]
    first_row_id: int | None = None  # format 3 data manifests


def _optional(avro: Any) -> list[Any]:
    return ["null", avro]


def _map(name: str, key_id: int, value_id: int, value: str) -> dict[str, Any]:
    return {"type": "array", "logicalType": "map", "items": {
        "type": "record", "name": name, "fields": [
            {"name": "key", "type": "int", "field-id": key_id},
            {"name": "value", "type": value, "field-id": value_id}]}}


def entry_schema(spec: Sequence[PartitionField], format_version: int = FORMAT_VERSION) -> dict[str, Any]:
    partition = {"type": "record", "name": "r102", "fields": [
        {"name": p.name, "type": avro_partition_type(p.iceberg_type), "default": None, "field-id": p.field_id}
        for p in spec]}
    fields: list[dict[str, Any]] = [
        {"name": "content", "type": "int", "field-id": 134},
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {"name": "partition", "type": partition, "field-id": 102},
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
        {"name": "column_sizes", "type": _optional(_map("k117_v118", 117, 118, "long")),
         "default": None, "field-id": 108},
        {"name": "value_counts", "type": _optional(_map("k119_v120", 119, 120, "long")),
         "default": None, "field-id": 109},
        {"name": "null_value_counts", "type": _optional(_map("k121_v122", 121, 122, "long")),
         "default": None, "field-id": 110},
        {"name": "lower_bounds", "type": _optional(_map("k126_v127", 126, 127, "bytes")),
         "default": None, "field-id": 125},
        {"name": "upper_bounds", "type": _optional(_map("k129_v130", 129, 130, "bytes")),
         "default": None, "field-id": 128},
        {"name": "split_offsets", "type": _optional({"type": "array", "items": "long", "element-id": 133}),
         "default": None, "field-id": 132},
        {"name": "referenced_data_file", "type": _optional("string"), "default": None, "field-id": 143},
    ]
    if format_version >= 3:
        fields += [
            {"name": "first_row_id", "type": _optional("long"), "default": None, "field-id": 142},
            {"name": "content_offset", "type": _optional("long"), "default": None, "field-id": 144},
            {"name": "content_size_in_bytes", "type": _optional("long"), "default": None, "field-id": 145}]
    data_file = {"type": "record", "name": "r2", "fields": fields}
    return {"type": "record", "name": "manifest_entry", "fields": [
        {"name": "status", "type": "int", "field-id": 0},
        {"name": "snapshot_id", "type": _optional("long"), "default": None, "field-id": 1},
        {"name": "sequence_number", "type": _optional("long"), "default": None, "field-id": 3},
        {"name": "file_sequence_number", "type": _optional("long"), "default": None, "field-id": 4},
        {"name": "data_file", "type": data_file, "field-id": 2},
    ]}


MANIFEST_FILE_SCHEMA: dict[str, Any] = {"type": "record", "name": "manifest_file", "fields": [
    {"name": "manifest_path", "type": "string", "field-id": 500},
    {"name": "manifest_length", "type": "long", "field-id": 501},
    {"name": "partition_spec_id", "type": "int", "field-id": 502},
    {"name": "content", "type": "int", "field-id": 517},
    {"name": "sequence_number", "type": "long", "field-id": 515},
    {"name": "min_sequence_number", "type": "long", "field-id": 516},
    {"name": "added_snapshot_id", "type": "long", "field-id": 503},
    {"name": "added_files_count", "type": "int", "field-id": 504},
    {"name": "existing_files_count", "type": "int", "field-id": 505},
    {"name": "deleted_files_count", "type": "int", "field-id": 506},
    {"name": "added_rows_count", "type": "long", "field-id": 512},
    {"name": "existing_rows_count", "type": "long", "field-id": 513},
    {"name": "deleted_rows_count", "type": "long", "field-id": 514},
    {"name": "partitions", "type": _optional({"type": "array", "element-id": 508, "items": {
        "type": "record", "name": "r508", "fields": [
            {"name": "contains_null", "type": "boolean", "field-id": 509},
            {"name": "contains_nan", "type": _optional("boolean"), "default": None, "field-id": 518},
            {"name": "lower_bound", "type": _optional("bytes"), "default": None, "field-id": 510},
            {"name": "upper_bound", "type": _optional("bytes"), "default": None, "field-id": 511}]}}),
     "default": None, "field-id": 507},
]}
MANIFEST_FILE_SCHEMA_V3: dict[str, Any] = {**MANIFEST_FILE_SCHEMA, "fields": [
    *MANIFEST_FILE_SCHEMA["fields"], {"name": "first_row_id", "type": _optional("long"), "default": None,
                                      "field-id": 520}]}
_MANIFEST_FILE_SCHEMAS = {2: MANIFEST_FILE_SCHEMA, 3: MANIFEST_FILE_SCHEMA_V3}
_MANIFEST_FILE_WRITERS = {v: fastavro.parse_schema(strip_logical_types(s)) for v, s in _MANIFEST_FILE_SCHEMAS.items()}


def _pairs(values: dict[int, Any]) -> list[dict[str, Any]] | None:
    return [{"key": k, "value": v} for k, v in sorted(values.items())] or None


def encode_manifest(entries: Iterable[Entry], spec: Sequence[PartitionField], spec_json: list[dict[str, Any]],
                    schema: dict[str, Any], content: int, compression: str,
                    format_version: int = FORMAT_VERSION) -> bytes:
    avro = entry_schema(spec, format_version)
    v3 = format_version >= 3
    records = ({
        "status": e.status, "snapshot_id": e.snapshot_id, "sequence_number": e.sequence_number,
        "file_sequence_number": e.sequence_number,
        "data_file": {
            "content": e.file.content, "file_path": e.file.path, "file_format": e.file.file_format,
            "partition": {p.name: avro_partition_value(v, p.iceberg_type)
                          for p, v in zip(spec, e.file.partition, strict=True)},
            "record_count": e.file.record_count, "file_size_in_bytes": e.file.file_size,
            "column_sizes": _pairs(e.file.column_sizes), "value_counts": _pairs(e.file.value_counts),
            "null_value_counts": _pairs(e.file.null_counts), "lower_bounds": _pairs(e.file.lower_bounds),
            "upper_bounds": _pairs(e.file.upper_bounds), "split_offsets": e.file.split_offsets,
            "referenced_data_file": e.file.referenced_data_file,
            **({"first_row_id": e.file.first_row_id, "content_offset": e.file.content_offset,
                "content_size_in_bytes": e.file.content_size} if v3 else {}),
        }} for e in entries)
    metadata = {"schema": json.dumps(schema), "schema-id": str(schema["schema-id"]),
                "partition-spec": json.dumps(spec_json), "partition-spec-id": "0",
                "format-version": str(format_version), "content": "deletes" if content == DELETES else "data"}
    return write_container(avro, fastavro.parse_schema(strip_logical_types(avro)), records, compression,
                           metadata=metadata)


def encode_manifest_list(manifests: Iterable[ManifestFile], snapshot_id: int, parent_id: int | None,
                         sequence_number: int, compression: str, format_version: int = FORMAT_VERSION,
                         first_row_id: int = 0) -> bytes:
    """A manifest list; at format 3 the data manifests carry their first_row_id already assigned
    (`first_row_id`: the snapshot's first-row-id)."""
    v3 = format_version >= 3
    records = ({
        "manifest_path": m.path, "manifest_length": m.length, "partition_spec_id": 0, "content": m.content,
        "sequence_number": m.sequence_number, "min_sequence_number": m.min_sequence_number,
        "added_snapshot_id": m.added_snapshot_id, "added_files_count": m.added_files,
        "existing_files_count": m.existing_files, "deleted_files_count": 0, "added_rows_count": m.added_rows,
        "existing_rows_count": m.existing_rows, "deleted_rows_count": 0, "partitions": m.partitions,
        **({"first_row_id": m.first_row_id} if v3 else {}),
    } for m in manifests)
    metadata = {"snapshot-id": str(snapshot_id), "parent-snapshot-id": "null" if parent_id is None else str(parent_id),
                "sequence-number": str(sequence_number), "format-version": str(format_version)}
    if v3:
        metadata["first-row-id"] = str(first_row_id)
    return write_container(_MANIFEST_FILE_SCHEMAS[format_version], _MANIFEST_FILE_WRITERS[format_version], records,
                           compression, metadata=metadata)


def decode_manifest_list(data: bytes, where: str) -> list[ManifestFile]:
    return [ManifestFile(r["manifest_path"], r["manifest_length"], r["content"], r["sequence_number"],
                         r["min_sequence_number"], r["added_snapshot_id"], r["added_files_count"],
                         r["existing_files_count"], r["added_rows_count"], r["existing_rows_count"],
                         r["partitions"] or [], r.get("first_row_id"))
            for r in read_container(data, where)]


def decode_entries(data: bytes, spec: Sequence[PartitionField], where: str) -> list[Entry]:
    """Entries of a manifest this module wrote (partition values come back physical)."""
    out = []
    for r in read_container(data, where):
        f = r["data_file"]
        partition = tuple(_physical(f["partition"].get(p.name), p.iceberg_type) for p in spec)
        out.append(Entry(r["status"], r["snapshot_id"], r["sequence_number"], DataFile(
            f["content"], f["file_path"], partition, f["record_count"], f["file_size_in_bytes"],
            {p["key"]: p["value"] for p in f.get("null_value_counts") or []},
            {p["key"]: p["value"] for p in f.get("lower_bounds") or []},
            {p["key"]: p["value"] for p in f.get("upper_bounds") or []}, f.get("referenced_data_file"),
            f["file_format"], f.get("first_row_id"), f.get("content_offset"), f.get("content_size_in_bytes"),
            {p["key"]: p["value"] for p in f.get("column_sizes") or []},
            {p["key"]: p["value"] for p in f.get("value_counts") or []}, f.get("split_offsets"))))
    return out


def _physical(value: Any, iceberg: str) -> Any:
    if value is not None and iceberg.startswith("decimal"):
        return int.from_bytes(value, "big", signed=True)
    return value


def position_delete_file(file_io: FileIO, target: str, data_path: str, positions: np.ndarray,
                         partition: tuple[Any, ...]) -> DataFile:
    """Write the deleted `positions` of one data file as a Parquet position-delete file at `target`
    (sorted by position, as the spec requires) and return its manifest entry's data file."""
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size > 1 and not bool(np.all(positions[1:] > positions[:-1])):
        positions = np.unique(positions)
    table = pa.Table.from_arrays([pa.DictionaryArray.from_arrays(np.zeros(positions.size, np.int32), [data_path]),
                                  pa.array(positions, pa.int64())],
                                 schema=pa.schema([POSITION_DELETE_SCHEMA.field(0).with_type(
                                     pa.dictionary(pa.int32(), pa.string())), POSITION_DELETE_SCHEMA.field(1)]))
    with file_io.arrow_fs()[0].open_output_stream(file_io.arrow_path(target)) as out:
        pq.write_table(table, out, store_schema=False)
    lower = {FILE_PATH_ID: data_path.encode()}
    upper = dict(lower)
    if positions.size:
        lower[POS_ID] = bound_bytes(int(positions[0]), "long")
        upper[POS_ID] = bound_bytes(int(positions[-1]), "long")
    return DataFile(DELETES, target, partition, int(positions.size), file_io.file_size(target),
                    {FILE_PATH_ID: 0, POS_ID: 0}, lower, upper, data_path)


def read_manifest_list(file_io: FileIO, path: str) -> list[ManifestFile]:
    return decode_manifest_list(file_io.read_bytes(path), path)


def read_entries(file_io: FileIO, manifest: ManifestFile, spec: Sequence[PartitionField]) -> list[Entry]:
    """A manifest's entries, decoded once per process (manifests are immutable, written under
    fresh names): a writer's syncs look at the same carried manifests commit after commit.
    Callers must not modify them."""
    entries: list[Entry] | None = DECODED_ENTRIES.get(manifest.path)
    if entries is None:
        entries = decode_entries(file_io.read_bytes(manifest.path), spec, manifest.path)
        DECODED_ENTRIES.put(manifest.path, entries, len(entries))
    return entries


def live_paths(file_io: FileIO, manifest: ManifestFile, spec: Sequence[PartitionField]) -> frozenset[str]:
    """The paths of a manifest's files that are not DELETED entries, kept per process as its
    entries are: a sync asks each carried manifest whether it lists a file a commit removed."""
    paths: frozenset[str] | None = LIVE_PATHS.get(manifest.path)
    if paths is None:
        paths = frozenset(e.file.path for e in read_entries(file_io, manifest, spec) if e.status != DELETED)
        LIVE_PATHS.put(manifest.path, paths, len(paths))
    return paths


def may_hold_partitions(manifest: ManifestFile, spec: Sequence[PartitionField],
                        partitions: Iterable[tuple[Any, ...]]) -> bool:
    """Whether the manifest's partition summaries allow one of these partitions (physical
    values in spec order): a sync then need not read a manifest that cannot list a removed file."""
    summaries = manifest.partitions
    if len(summaries) != len(spec):
        return True  # no summaries (or another spec's): cannot tell
    bounds = []
    for field_summary, p in zip(summaries, spec, strict=True):
        low, high = field_summary.get("lower_bound"), field_summary.get("upper_bound")
        bounds.append((field_summary.get("contains_null", True),
                       None if low is None else from_bound_bytes(low, p.iceberg_type),
                       None if high is None else from_bound_bytes(high, p.iceberg_type)))
    return any(all(_summary_holds(value, *bound) for value, bound in zip(partition, bounds, strict=True))
               for partition in partitions)


def _summary_holds(value: Any, contains_null: bool, low: Any, high: Any) -> bool:
    if value is None:
        return bool(contains_null)
    if low is None and high is None:
        return not contains_null  # only nulls, or no summary at all
    if low is None or high is None:
        return True
    return in_bounds(value, low, high)


def listed_files(file_io: FileIO, manifest_list: str, spec: Sequence[PartitionField], content: int) -> list[DataFile]:
    """The data (or delete) files a snapshot's manifest list names."""
    return [e.file for m in read_manifest_list(file_io, manifest_list) if m.content == content
            for e in read_entries(file_io, m, spec)]
