"""A small reader of a table's Iceberg metadata, written from the Iceberg table spec (formats 2 and
3) for the simulation's Iceberg check: which metadata version a reader picks, which data and
delete files its snapshots name, and the rows they yield.

It does not go through Strata's Iceberg writer: manifest entries are read with their inherited
sequence numbers, DELETED entries skipped, position-delete files applied to data files whose data
sequence number is not greater than theirs, and a format-3 deletion vector read by its
``content_offset`` and ``content_size_in_bytes``. Data files are Parquet, columns matched by field
id (a column a file lacks reads as nulls). Values come back as Arrow's ``to_pylist`` gives them,
so they compare with the model's.
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

from strata.fs import FileIO
from strata.iceberg.puffin import read_dv_blob
from strata.manifest.avro_container import read_container

DELETED = 2
HINT = "version-hint.text"


class IcebergMetadataBroken(AssertionError):
    """Iceberg metadata a reader cannot read: a missing file, a malformed entry (the message names it)."""


@dataclass(frozen=True)
class MetadataVersion:
    """One metadata file as a reader finds it: `reader` says who picks it."""

    number: int
    location: str
    reader: str  # "hint" (Strata's REST catalog: the hint's version, its .stats variant first) | "hadoop" (probing)
    metadata: dict[str, Any]

    @property
    def current_snapshot_id(self) -> int | None:
        current = self.metadata.get("current-snapshot-id")
        return None if current in (None, -1) else int(current)

    def snapshot(self, snapshot_id: int) -> dict[str, Any] | None:
        return next((s for s in self.metadata.get("snapshots") or [] if s["snapshot-id"] == snapshot_id), None)

    def tag_refs(self) -> dict[str, int]:
        return {name: int(ref["snapshot-id"]) for name, ref in (self.metadata.get("refs") or {}).items()
                if ref.get("type") == "tag"}


@dataclass
class SnapshotRows:
    """What one Iceberg snapshot yields: its rows by field id, and the files it names."""

    columns: dict[int, list[Any]]  # field id -> values (the snapshot schema's top-level fields)
    names: dict[int, str]
    data_files: list[str] = field(default_factory=list)
    delete_files: list[str] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0


def metadata_files(file_io: FileIO, metadata_dir: str) -> list[MetadataVersion]:
    """The metadata versions readers pick: the hint's (with its statistics variant, as Strata's
    REST catalog serves it, when there is one) and, when it differs, the newest one Iceberg's
    Hadoop-table reader finds by probing past the hint. Empty before the mirror's first version."""
    try:
        hint = int(file_io.read_bytes(f"{metadata_dir}/{HINT}").decode().strip())
    except FileNotFoundError:
        return []
    found = []
    stats = f"{metadata_dir}/v{hint}.stats.metadata.json"
    plain = f"{metadata_dir}/v{hint}.metadata.json"
    for location in (stats, plain):
        if file_io.exists(location):
            found.append(MetadataVersion(hint, location, "hint", _json(file_io, location)))
            break
    else:
        raise IcebergMetadataBroken(f"{HINT} names version {hint}, but neither {plain} nor its .stats variant exists")
    probed = hint
    while file_io.exists(f"{metadata_dir}/v{probed + 1}.metadata.json"):
        probed += 1
    if probed != hint or found[0].location != plain:
        location = f"{metadata_dir}/v{probed}.metadata.json"
        found.append(MetadataVersion(probed, location, "hadoop", _json(file_io, location)))
    return found


def _schema(version: MetadataVersion, schema_id: int) -> dict[str, Any]:
    schema = next((s for s in version.metadata.get("schemas") or [] if s["schema-id"] == schema_id), None)
    if schema is None:
        raise IcebergMetadataBroken(f"Iceberg metadata {version.location} names schema id {schema_id} "
                                    "it does not define")
    return dict(schema)


def _json(file_io: FileIO, location: str) -> dict[str, Any]:
    return dict(json.loads(file_io.read_bytes(location)))


def read_snapshot(file_io: FileIO, version: MetadataVersion, snapshot_id: int) -> SnapshotRows:
    """The rows Iceberg snapshot `snapshot_id` of `version` yields; every file it names must exist."""
    snapshot = version.snapshot(snapshot_id)
    if snapshot is None:
        raise IcebergMetadataBroken(f"{version.location} names no snapshot {snapshot_id}")
    schema = _schema(version, snapshot.get("schema-id", version.metadata["current-schema-id"]))
    data_files, deletes = _live_files(file_io, snapshot["manifest-list"], version.location)
    vectors, positions = _deletes(file_io, deletes)
    fields = schema["fields"]
    columns: dict[int, list[Any]] = {f["id"]: [] for f in fields}
    for f in data_files:
        table = _read(file_io, f["file_path"], "data file")
        keep = _kept(f, table.num_rows, vectors, positions)
        by_id = _columns_by_id(table)
        for fd in fields:
            column = by_id.get(fd["id"])
            values = [None] * table.num_rows if column is None else column.to_pylist()
            columns[fd["id"]].extend(v for v, k in zip(values, keep, strict=True) if k)
    return SnapshotRows(columns, {f["id"]: f["name"] for f in fields}, [f["file_path"] for f in data_files],
                        [d["file_path"] for d in deletes])


def _live_files(file_io: FileIO, manifest_list: str, where: str
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The live data files and delete files of a manifest list, each with its data sequence number."""
    data_files: list[dict[str, Any]] = []
    deletes: list[dict[str, Any]] = []
    for m in _avro(file_io, manifest_list, f"manifest list of {where}"):
        for entry in _avro(file_io, m["manifest_path"], f"manifest of {manifest_list}"):
            if entry["status"] == DELETED:
                continue
            f = dict(entry["data_file"])
            f["sequence_number"] = m["sequence_number"] if entry["sequence_number"] is None \
                else entry["sequence_number"]
            if f["content"] == 2:
                raise IcebergMetadataBroken(f"{m['manifest_path']}: an equality delete file, which the mirror "
                                            f"never writes: {f['file_path']}")
            (data_files if f["content"] == 0 else deletes).append(f)
    return data_files, deletes


def _deletes(file_io: FileIO, deletes: list[dict[str, Any]]
             ) -> tuple[dict[str, np.ndarray], dict[str, list[tuple[int, np.ndarray]]]]:
    """Deletion vectors by data file, and position deletes by data file with their sequence numbers."""
    vectors: dict[str, np.ndarray] = {}
    positions: dict[str, list[tuple[int, np.ndarray]]] = defaultdict(list)
    for d in deletes:
        if d["file_format"].upper() == "PUFFIN":
            target = d["referenced_data_file"]
            if target in vectors:
                raise IcebergMetadataBroken(f"two deletion vectors for data file {target}")
            blob = _read_range(file_io, d["file_path"], d["content_offset"], d["content_size_in_bytes"])
            vectors[target] = read_dv_blob(blob, d["file_path"], d["record_count"])
            continue
        table = _read(file_io, d["file_path"], "position delete file")
        paths = table.column("file_path")
        for path in pc.unique(paths).to_pylist():
            pos = table.filter(pc.equal(paths, path)).column("pos").to_numpy()
            positions[path].append((d["sequence_number"], pos))
    return vectors, positions


def _kept(f: dict[str, Any], num_rows: int, vectors: dict[str, np.ndarray],
          positions: dict[str, list[tuple[int, np.ndarray]]]) -> np.ndarray:
    path = f["file_path"]
    if path in vectors:
        dropped = vectors[path]
    else:
        applied = [p for seq, p in positions.get(path, []) if f["sequence_number"] <= seq]
        dropped = np.concatenate(applied) if applied else np.empty(0, np.int64)
    if dropped.size and int(dropped.max()) >= num_rows:
        raise IcebergMetadataBroken(f"deletes of {path} name position {int(dropped.max())}; it has {num_rows} rows")
    keep = np.ones(num_rows, dtype=bool)
    keep[dropped] = False
    return keep


def _columns_by_id(table: pa.Table) -> dict[int, pa.ChunkedArray]:
    return {int(f.metadata[b"PARQUET:field_id"]): table.column(i) for i, f in enumerate(table.schema)
            if f.metadata and b"PARQUET:field_id" in f.metadata}


def _avro(file_io: FileIO, path: str, what: str) -> list[dict[str, Any]]:
    try:
        data = file_io.read_bytes(path)
    except FileNotFoundError:
        raise IcebergMetadataBroken(f"the {what} {path} is missing") from None
    return list(read_container(data, f"Iceberg {what}"))


def _read(file_io: FileIO, path: str, what: str) -> pa.Table:
    try:
        data = file_io.read_bytes(path)
    except FileNotFoundError:
        raise IcebergMetadataBroken(f"the {what} {path} that the Iceberg metadata names is missing") from None
    return pq.read_table(pa.BufferReader(data))


def _read_range(file_io: FileIO, path: str, offset: int, size: int) -> bytes:
    try:
        with file_io.open_input_file(path) as f:
            return bytes(f.read_at(size, offset))
    except FileNotFoundError:
        raise IcebergMetadataBroken(f"the deletion vector file {path} that the Iceberg metadata names is missing") \
            from None
