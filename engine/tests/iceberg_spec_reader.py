"""A small Iceberg table reader written from the table spec (format versions 2 and 3), independent
of Strata's writer and of pyiceberg, for tests: the rows of one snapshot and the facts behind them.

It follows the spec's rules: manifest entries' sequence numbers and snapshot ids inherited from
the manifest, DELETED entries skipped, row lineage (a data file's ``first_row_id`` inherited from
its manifest's plus the record counts of the files before it), position deletes applied to data
files whose data sequence number is not greater than the delete's, and a deletion vector (format
3) read by ``content_offset`` / ``content_size_in_bytes`` (the direct access the spec gives it)
and checked (length, magic, CRC-32, cardinality = ``record_count``); at most one vector per data
file, and position-delete files ignored for a file that has one. Reading a vector by offset rather
than through the Puffin footer is what lets it read Paimon 1.3.1's format-3 export too, whose
entries point into Paimon's deletion-vector index files (not Puffin files). Data files are Parquet,
columns matched by field id.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from strata.fs import file_io_for
from strata.iceberg.puffin import read_dv_blob
from strata.manifest.avro_container import read_container

ADDED, DELETED = 1, 2


@dataclass
class SpecView:
    rows: pa.Table
    format_version: int
    metadata: dict[str, Any]
    snapshot: dict[str, Any]
    manifests: list[dict[str, Any]]  # manifest-list records
    data_files: list[dict[str, Any]]  # live data files: path, record_count, sequence_number, first_row_id
    deletes: list[dict[str, Any]] = field(default_factory=list)  # live delete entries (data_file dicts + seq)


def _avro(data: bytes) -> list[dict[str, Any]]:
    """An Avro file's records by its own writer schema (fastavro; the container's codecs by the
    engine's helper, as this venv's fastavro has no snappy)."""
    return list(read_container(data, "iceberg file"))


def read_snapshot(metadata_location: str, snapshot_id: int | None = None,
                  options: dict[str, str] | None = None) -> SpecView:
    fio = file_io_for(metadata_location, options)
    metadata = json.loads(fio.read_bytes(metadata_location))
    wanted = metadata["current-snapshot-id"] if snapshot_id is None else snapshot_id
    snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == wanted)
    schema_id = snapshot.get("schema-id", metadata["current-schema-id"])
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == schema_id)
    manifests = _avro(fio.read_bytes(snapshot["manifest-list"]))

    data_files: list[dict[str, Any]] = []
    deletes: list[dict[str, Any]] = []
    for m in manifests:
        next_row_id = m.get("first_row_id")
        for e in _avro(fio.read_bytes(m["manifest_path"])):
            f = dict(e["data_file"])
            if f["content"] == 0 and next_row_id is not None and f.get("first_row_id") is None:
                f["first_row_id"] = next_row_id  # inherited (DELETED entries count too)
                next_row_id += f["record_count"]
            if e["status"] == DELETED:
                continue
            seq = e["sequence_number"]
            if seq is None:
                assert e["status"] == ADDED, e
                seq = m["sequence_number"]
            f["sequence_number"] = seq
            assert m["content"] == (0 if f["content"] == 0 else 1), (m, f)
            (data_files if f["content"] == 0 else deletes).append(f)

    vectors: dict[str, np.ndarray] = {}
    positions: dict[str, list[tuple[int, np.ndarray]]] = defaultdict(list)
    for d in deletes:
        assert d["content"] == 1, "equality deletes are not expected"
        if d["file_format"].upper() == "PUFFIN":
            target = d["referenced_data_file"]
            assert target is not None and target not in vectors, f"at most one deletion vector per file: {target}"
            with fio.open_input_file(d["file_path"]) as f:
                blob = f.read_at(d["content_size_in_bytes"], d["content_offset"])
            vectors[target] = read_dv_blob(blob, d["file_path"], d["record_count"])
            d["vector"] = vectors[target]
        else:
            table = pq.read_table(pa.BufferReader(fio.read_bytes(d["file_path"])))
            for path in set(table.column("file_path").to_pylist()):
                pos = table.filter(pc.equal(table.column("file_path"), path)).column("pos").to_numpy()
                positions[path].append((d["sequence_number"], pos))

    arrow_schema = pa.schema([(f["name"], _arrow(f["type"])) for f in schema["fields"]])
    parts = []
    for f in data_files:
        table = _read_data(fio, f["file_path"], schema)
        if f["file_path"] in vectors:
            assert vectors[f["file_path"]].size == 0 or vectors[f["file_path"]].max() < f["record_count"]
            dropped = vectors[f["file_path"]]
        else:
            applied = [p for seq, p in positions.get(f["file_path"], []) if f["sequence_number"] <= seq]
            dropped = np.concatenate(applied) if applied else np.empty(0, np.int64)
        if dropped.size:
            keep = np.ones(table.num_rows, dtype=bool)
            keep[dropped] = False
            table = table.filter(pa.array(keep))
        parts.append(table.cast(arrow_schema))
    rows = pa.concat_tables(parts) if parts else arrow_schema.empty_table()
    return SpecView(rows, int(metadata["format-version"]), metadata, snapshot, manifests, data_files, deletes)


def _read_data(fio: Any, path: str, schema: dict[str, Any]) -> pa.Table:
    table = pq.read_table(pa.BufferReader(fio.read_bytes(path)))
    by_id = {int(f.metadata[b"PARQUET:field_id"]): i for i, f in enumerate(table.schema)
             if f.metadata and b"PARQUET:field_id" in f.metadata}
    columns = []
    for f in schema["fields"]:
        i = by_id.get(f["id"])
        columns.append(table.column(i) if i is not None else pa.nulls(table.num_rows, _arrow(f["type"])))
    return pa.table(columns, names=[f["name"] for f in schema["fields"]])


def _arrow(iceberg: Any) -> pa.DataType:
    if not isinstance(iceberg, str):
        raise AssertionError(f"nested types are not read: {iceberg}")
    simple = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
              "double": pa.float64(), "date": pa.date32(), "string": pa.string(), "binary": pa.binary(),
              "timestamp": pa.timestamp("us"), "timestamptz": pa.timestamp("us", tz="UTC")}
    if iceberg in simple:
        return simple[iceberg]
    if iceberg.startswith("decimal("):
        precision, scale = (int(x) for x in iceberg[8:-1].split(","))
        return pa.decimal128(precision, scale)
    raise AssertionError(f"type {iceberg} is not read")
