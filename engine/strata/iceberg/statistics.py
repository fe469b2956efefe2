"""Iceberg table statistics: the number of distinct values (NDV) of each column, as Puffin
``apache-datasketches-theta-v1`` blobs listed under ``statistics`` in the table metadata, which is
where Trino's cost-based optimizer finds them (its ``SHOW STATS`` distinct counts).

Facts this follows (Iceberg spec, Trino's TableStatisticsReader):
- a statistics file belongs to one snapshot; its table-metadata entry has ``snapshot-id``,
  ``statistics-path``, ``file-size-in-bytes``, ``file-footer-size-in-bytes`` and ``blob-metadata``
  (type, snapshot-id, sequence-number, fields, properties);
- Trino reads the ``ndv`` property of the entry's blob metadata (not the Puffin file); it takes the
  statistics file of the queried snapshot or of its nearest ancestor (walking parent-snapshot-id),
  at most one file per snapshot id.

So statistics are computed off the commit path (``strata iceberg stats db.t``), after the first
commit that gives the table rows, or after a compaction once the table's record count moved by
more than STALE_FRACTION since the last ones,
and each new metadata version carries the entries of snapshots it keeps forward (``carried``),
which keeps Trino on them until the next refresh.

The sketches come from the Apache DataSketches library (``datasketches``, the ``stats`` extra),
fed column by column, a slice of rows at a time (memory: one slice plus one sketch per column).
The spec feeds each value's single-value serialization to the sketch; the library takes Python
ints, floats and strs, so: strings are fed as themselves and 64-bit values (long, timestamp in
microseconds, double bits) as 64-bit integers, both hashed exactly as their Iceberg bytes are;
4-byte ints, dates, floats and booleans are widened to 64 bits, decimals fed as their canonical
text and binaries as hex text. The distinct counts are the same; only a merge with a sketch
another engine computed over those 4-byte or byte-array types would count values twice.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.iceberg import puffin

if TYPE_CHECKING:
    from strata.table.table import Table

log = logging.getLogger(__name__)

LG_K = 12  # 4096 nominal entries (Trino's default): about 1.6% relative standard error
SLICE_ROWS = 65_536  # rows converted to Python values at a time
STALE_FRACTION = 0.1  # a compaction refreshes statistics once total-records moved this much
VERSION_HINT = "version-hint.text"
ATTACH_ATTEMPTS = 5
COMPACTION = "replace"  # the Iceberg operation of a compaction's snapshot


@dataclass
class StatisticsResult:
    snapshot_id: int | None
    path: str | None = None
    ndv: dict[str, int] | None = None  # by column name
    reason: str = ""  # why nothing was written


# -- sketches ------------------------------------------------------------------------------------

def _sketchable(arrow_type: pa.DataType) -> bool:
    return not pa.types.is_nested(arrow_type) and not pa.types.is_null(arrow_type)


def _values(array: pa.Array) -> Iterable[Any]:
    """The non-null values of a column slice as the Python ints / floats / strs fed to a sketch."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    array = pc.drop_null(array)
    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return array.to_pylist()
    if pa.types.is_float64(t):
        return array.to_numpy(zero_copy_only=False).view(np.int64).tolist()
    if pa.types.is_decimal(t):
        return array.cast(pa.string()).to_pylist()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return map(bytes.hex, array.to_pylist())
    if pa.types.is_boolean(t):
        array = array.cast(pa.int8())
    elif pa.types.is_timestamp(t):  # Iceberg timestamps are microseconds (nanoseconds kept as they are)
        array = array.cast(pa.timestamp("us" if t.unit != "ns" else "ns", t.tz)).cast(pa.int64())
    elif pa.types.is_time(t):
        array = array.cast(pa.time64("us")).cast(pa.int64())
    elif pa.types.is_date(t):
        array = array.cast(pa.date32()).cast(pa.int32())
    elif pa.types.is_temporal(t):
        array = array.cast(pa.int64())
    return array.to_numpy(zero_copy_only=False).tolist()


def sketch_batches(batches: Iterable[pa.RecordBatch], columns: list[str]) -> dict[str, Any]:
    """A theta sketch per column over the batches (the columns must be in every batch)."""
    from datasketches import update_theta_sketch

    sketches = {name: update_theta_sketch(LG_K) for name in columns}
    for batch in batches:
        for start in range(0, batch.num_rows, SLICE_ROWS):
            piece = batch.slice(start, SLICE_ROWS)
            for name, sketch in sketches.items():
                # map() runs the library's update over the slice without a Python-level loop
                collections.deque(map(sketch.update, _values(piece.column(name))), maxlen=0)
    return sketches


def compute(table: Table, snapshot_id: int) -> tuple[list[puffin.ThetaBlob], dict[str, int]]:
    """Theta blobs of the top-level primitive columns of the table at a snapshot, and NDV by name."""
    snapshot = table.snapshot_manager.snapshot(snapshot_id)
    schema = table.schema_at(snapshot.schema_id)
    fields = [f for f in schema.fields if _sketchable(f.type.to_arrow())]
    names = [f.name for f in fields]
    sketches = sketch_batches(table.to_batches(columns=names, snapshot_id=snapshot_id), names)
    blobs, ndv = [], {}
    for f in fields:
        compact = sketches[f.name].compact()
        ndv[f.name] = round(compact.get_estimate())
        blobs.append(puffin.ThetaBlob(f.id, compact.serialize(), ndv[f.name]))
    return blobs, ndv


# -- table metadata ----------------------------------------------------------------------------

def carried(previous: dict[str, Any] | None, snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The statistics entries a new metadata version keeps: those of snapshots it still lists."""
    kept = {s["snapshot-id"] for s in snapshots}
    return [e for e in (previous or {}).get("statistics") or [] if e.get("snapshot-id") in kept]


def unreferenced(previous: dict[str, Any], metadata: dict[str, Any], metadata_dir: str) -> list[str]:
    """Statistics files of ours the previous version listed and the new one no longer does."""
    now = {e["statistics-path"] for e in metadata.get("statistics") or []}
    return [e["statistics-path"] for e in previous.get("statistics") or []
            if e["statistics-path"] not in now and e["statistics-path"].startswith(f"{metadata_dir}/")]


def _read_hint(table: Table, metadata_dir: str) -> int | None:
    try:
        return int(table.file_io.read_bytes(f"{metadata_dir}/{VERSION_HINT}").decode().strip())
    except (FileNotFoundError, ValueError):
        return None


def _load(table: Table, metadata_dir: str, version: int) -> dict[str, Any] | None:
    try:
        return dict(json.loads(table.file_io.read_bytes(f"{metadata_dir}/v{version}.metadata.json")))
    except FileNotFoundError:
        return None


def _current_id(metadata: dict[str, Any]) -> int | None:
    current = metadata.get("current-snapshot-id")
    return None if current in (None, -1) else int(current)


def refresh(table: Table, metadata_dir: str) -> StatisticsResult:
    """Compute the statistics of the published current snapshot, write their Puffin file into
    ``metadata_dir`` and list it in the newest metadata version (replacing older entries)."""
    version = _read_hint(table, metadata_dir)
    metadata = None if version is None else _load(table, metadata_dir, version)
    snapshot_id = None if metadata is None else _current_id(metadata)
    if metadata is None or snapshot_id is None:
        return StatisticsResult(None, reason="no Iceberg snapshot published yet")
    blobs, ndv = compute(table, snapshot_id)
    stats = puffin.write_statistics(blobs, snapshot_id, snapshot_id)
    path = f"{metadata_dir}/{snapshot_id}-{uuid.uuid4()}.stats"
    table.file_io.write_bytes(path, stats.data)
    entry = {"snapshot-id": snapshot_id, "statistics-path": path, "file-size-in-bytes": len(stats.data),
             "file-footer-size-in-bytes": stats.footer_size, "blob-metadata": stats.blob_metadata}
    replaced = _attach(table, metadata_dir, entry)
    if replaced is None:
        table.file_io.delete(path)
        return StatisticsResult(snapshot_id, reason=f"snapshot {snapshot_id} left the Iceberg metadata meanwhile")
    for old in replaced:
        if old.startswith(f"{metadata_dir}/") and old != path:
            _delete(table, old)
    return StatisticsResult(snapshot_id, path, ndv)


def _attach(table: Table, metadata_dir: str, entry: dict[str, Any]) -> list[str] | None:
    """List `entry` in the newest metadata version, rewritten in place (a metadata version is named
    by its Paimon snapshot, so statistics cannot make a new one). A sync that read the version
    before and published the next one meanwhile is followed. Returns the statistics paths the
    entry replaced, or None when its snapshot is no longer in the metadata."""
    replaced: list[str] = []
    version = _read_hint(table, metadata_dir)
    for _ in range(ATTACH_ATTEMPTS):
        metadata = None if version is None else _load(table, metadata_dir, version)
        if metadata is None or entry["snapshot-id"] not in {s["snapshot-id"] for s in metadata["snapshots"]}:
            return None
        old = metadata.get("statistics") or []
        if any(e["snapshot-id"] > entry["snapshot-id"] for e in old):
            return [entry["statistics-path"]]  # newer statistics exist: ours are superseded
        replaced += [e["statistics-path"] for e in old]
        metadata["statistics"] = [entry]
        table.file_io.write_bytes(f"{metadata_dir}/v{version}.metadata.json",
                                  json.dumps(metadata, indent=1).encode())
        latest = _read_hint(table, metadata_dir)
        if latest == version:
            return replaced
        version = latest
    return replaced


def _delete(table: Table, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        table.file_io.delete(path)


def stale(metadata: dict[str, Any]) -> bool:
    """Metadata a commit just published needs statistics: the table has rows and none yet (its
    first rows get them, as Trino's CREATE TABLE AS collects them while writing; a table loaded
    once, never compacted, would stay without), or a compaction published it and total-records
    moved by more than STALE_FRACTION since the snapshot they were computed at."""
    snapshots = {s["snapshot-id"]: s for s in metadata["snapshots"]}
    current = snapshots.get(_current_id(metadata))
    if current is None:
        return False
    entries = metadata.get("statistics") or []
    if not entries:
        return _records(current) > 0
    if current.get("summary", {}).get("operation") != COMPACTION:
        return False
    then = snapshots.get(max(e["snapshot-id"] for e in entries))
    if then is None:
        return True
    return abs(_records(current) - _records(then)) > STALE_FRACTION * max(_records(then), 1)


def _records(snapshot: dict[str, Any]) -> int:
    return int(snapshot.get("summary", {}).get("total-records", 0))


def refresh_after_commit(table: Table, metadata_dir: str, published: dict[str, Any] | None) -> None:
    """The commit's follow-up (``metadata.iceberg.statistics=compaction``), given the metadata its
    sync published (None: nothing published): compute statistics for a table's first rows, and
    refresh them when a compaction left them stale. No request is made otherwise. A failure is
    logged; the commit and its metadata stand."""
    if published is None or str(table.core.get("metadata.iceberg.statistics")) != "compaction":
        return
    try:
        if stale(published):
            refresh(table, metadata_dir)
    except ImportError:
        log.info("table %s: Iceberg statistics need the datasketches package (the stats extra)", table.identifier)
    except Exception:
        log.warning("table %s: Iceberg statistics refresh failed", table.identifier, exc_info=True)
