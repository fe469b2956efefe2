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

When they are computed: by ``strata iceberg stats db.t`` (``refresh``), and, with
``metadata.iceberg.statistics=compaction``, after a commit (``refresh_after_commit``): for the
first commit that gives the table rows, and after a compaction once the table's record count moved
by more than STALE_FRACTION since the last ones. That automatic refresh runs after the commit's
metadata is published (Iceberg readers already see the snapshot), in the committing thread: it
scans the table, so it runs only up to AUTO_MAX_VALUES column values (larger tables get theirs from
the command), and a refresh that fails is counted, logged once and retried only after a back-off
(2, 4, 8... snapshots, recorded in the table's BACKOFF_FILE), not at every commit.

How they are published: a metadata version is never rewritten; statistics go into the version's
own statistics version, ``v<N>.stats.metadata.json`` (strata.iceberg.versions), and each later
version carries the entries of the snapshots it keeps (``carried``), which keeps Trino on them until
the next refresh. A sync that built v<N+1> from v<N> while the statistics version of v<N> was
being published carries them on itself (``carry_forward``), or the refresh sees v<N+1> and
publishes its statistics version too (``_attach``); a refresh that publishes nowhere deletes its
file, one whose outcome is unknown keeps it.

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
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata import metrics
from strata.iceberg import puffin, versions
from strata.iceberg.versions import current_id
from strata.store import FileStore, HasStore, store_of
from strata.table.read import read_batches

log = logging.getLogger(__name__)

LG_K = 12  # 4096 nominal entries (Trino's default): about 1.6% relative standard error
SLICE_ROWS = 65_536  # rows converted to Python values at a time
DISTINCT_FRACTION = 0.5  # a slice with at most this share of distinct values: its next one is deduplicated first
STALE_FRACTION = 0.1  # a compaction refreshes statistics once total-records moved this much
ATTACH_ATTEMPTS = 5
# rows x columns a commit sketches itself: tables the size of TPC-H SF 1's lineitem (6M rows x 16
# columns) get their NDV with their first rows, as Trino's CREATE TABLE AS collects them while writing
# (several seconds of reading and sketching); larger ones from `strata iceberg stats`
AUTO_MAX_VALUES = 100_000_000
MAX_BACKOFF_SNAPSHOTS = 1024  # a failing automatic refresh is retried at most this many snapshots apart
BACKOFF_FILE = "iceberg-statistics-error.json"  # in the table's directory: the failures of automatic refreshes
_TOO_LARGE: set[str] = set()  # tables told (once per process) that they are past AUTO_MAX_VALUES
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
    """A theta sketch per column over the batches (the columns must be in every batch).

    A value fed twice leaves a sketch as it was, so a column whose slices repeat their values
    (flags, dates, small ranges: most of a fact table's columns) is fed each slice's distinct
    values only (``pyarrow.compute.unique``, far cheaper than turning every value into a Python
    object and hashing it); a column whose previous slice was mostly distinct is fed as it is."""
    from datasketches import update_theta_sketch

    sketches = {name: update_theta_sketch(LG_K) for name in columns}
    repeats = dict.fromkeys(columns, True)  # did the column's last slice repeat values (try at first)
    for batch in batches:
        for start in range(0, batch.num_rows, SLICE_ROWS):
            piece = batch.slice(start, SLICE_ROWS)
            for name, sketch in sketches.items():
                column = piece.column(name)
                if repeats[name] and len(column):
                    distinct = pc.unique(column)
                    repeats[name] = len(distinct) <= DISTINCT_FRACTION * len(column)
                    column = distinct
                # map() runs the library's update over the slice without a Python-level loop
                collections.deque(map(sketch.update, _values(column)), maxlen=0)
    return sketches


def compute(table: FileStore | HasStore, snapshot_id: int) -> tuple[list[puffin.ThetaBlob], dict[str, int]]:
    """Theta blobs of the top-level primitive columns of the table at a snapshot, and NDV by name."""
    table = store_of(table)
    snapshot = table.snapshot_manager.snapshot(snapshot_id)
    schema = table.schema_at(snapshot.schema_id)
    fields = [f for f in schema.fields if _sketchable(f.type.to_arrow())]
    names = [f.name for f in fields]
    sketches = sketch_batches(read_batches(table, names, None, snapshot_id), names)
    blobs, ndv = [], {}
    for f in fields:
        compact = sketches[f.name].compact()
        ndv[f.name] = round(compact.get_estimate())
        blobs.append(puffin.ThetaBlob(f.id, compact.serialize(), ndv[f.name]))
    return blobs, ndv


# -- table metadata ----------------------------------------------------------------------------

def carried(previous: dict[str, Any] | None, snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The statistics entries a new metadata version keeps: those of snapshots it still lists, the
    very snapshots (same commit time), not others of the same id that followed a rollback."""
    kept = {s["snapshot-id"]: s.get("timestamp-ms") for s in snapshots}
    then = {s["snapshot-id"]: s.get("timestamp-ms") for s in (previous or {}).get("snapshots") or []}
    return [e for e in (previous or {}).get("statistics") or []
            if e.get("snapshot-id") in kept and then.get(e["snapshot-id"]) == kept[e["snapshot-id"]]]


def unreferenced(previous: dict[str, Any], metadata: dict[str, Any], metadata_dir: str) -> list[str]:
    """Statistics files of ours the previous version listed and the new one no longer does."""
    now = {e["statistics-path"] for e in metadata.get("statistics") or []}
    return [e["statistics-path"] for e in previous.get("statistics") or []
            if e["statistics-path"] not in now and e["statistics-path"].startswith(f"{metadata_dir}/")]


def _snapshot_ids(metadata: dict[str, Any]) -> set[int]:
    return {s["snapshot-id"] for s in metadata.get("snapshots") or []}


def refresh(table: FileStore | HasStore, metadata_dir: str) -> StatisticsResult:
    """Compute the statistics of the published current snapshot, write their Puffin file into
    ``metadata_dir`` and publish them in the statistics version of the newest metadata version
    (``v<N>.stats.metadata.json``; see strata.iceberg.versions), replacing older entries.
    CommitStateUnknownError when the publish cannot be settled (the file is kept)."""
    table = store_of(table)
    current = versions.current(table.file_io, metadata_dir)
    metadata = None if current is None else current.metadata
    snapshot_id = None if metadata is None else current_id(metadata)
    if metadata is None or snapshot_id is None:
        return StatisticsResult(None, reason="no Iceberg snapshot published yet")
    done = next((e for e in metadata.get("statistics") or [] if e.get("snapshot-id") == snapshot_id), None)
    if done is not None:
        return StatisticsResult(snapshot_id, done["statistics-path"], _listed_ndv(table, snapshot_id, done),
                                reason=f"statistics of snapshot {snapshot_id} are published already")
    blobs, ndv = compute(table, snapshot_id)
    stats = puffin.write_statistics(blobs, snapshot_id, snapshot_id)
    path = f"{metadata_dir}/{snapshot_id}-{uuid.uuid4()}.stats"
    table.file_io.write_bytes(path, stats.data)
    entry = {"snapshot-id": snapshot_id, "statistics-path": path, "file-size-in-bytes": len(stats.data),
             "file-footer-size-in-bytes": stats.footer_size, "blob-metadata": stats.blob_metadata}
    outcome = _attach(table, metadata_dir, entry)
    if outcome.published is None:
        _delete(table, path)  # definitely in no metadata version
        return StatisticsResult(snapshot_id, reason=outcome.reason)
    for old in outcome.replaced:
        if old.startswith(f"{metadata_dir}/") and old != path:
            _delete(table, old)
    return StatisticsResult(snapshot_id, path if outcome.published else None, ndv, reason=outcome.reason)


def _listed_ndv(table: FileStore, snapshot_id: int, entry: dict[str, Any]) -> dict[str, int]:
    schema = table.schema_at(table.snapshot_manager.snapshot(snapshot_id).schema_id)
    names = {f.id: f.name for f in schema.fields}
    return {names[b["fields"][0]]: int(b["properties"]["ndv"]) for b in entry.get("blob-metadata") or []
            if b.get("fields") and b["fields"][0] in names and "ndv" in (b.get("properties") or {})}


@dataclass
class _Attached:
    published: bool | None  # True: listed in the current version; False: in a superseded one; None: in none
    replaced: list[str]
    reason: str = ""


def _attach(table: FileStore, metadata_dir: str, entry: dict[str, Any]) -> _Attached:
    """Publish `entry` in the statistics version of the newest metadata version. A version is
    never rewritten: ``v<N>.stats.metadata.json`` is created once. A sync that read v<N> before
    the statistics version existed and publishes v<N+1> meanwhile either sees it after its own
    publish (and carries the entry on: ``carry_forward``) or is seen here (v<N+1> exists after
    ours is published): then the entry goes into v<N+1>'s statistics version too. Each side
    writes, then looks for the other's write, so one of the two always sees the other."""
    io = table.file_io
    published_in: int | None = None
    replaced: list[str] = []
    version = versions.read_hint(io, metadata_dir)
    for _ in range(ATTACH_ATTEMPTS):
        current = versions.load(io, metadata_dir, version)
        if current is None or version is None:
            return _lost(published_in, replaced, "the Iceberg metadata moved on meanwhile")
        metadata = current.metadata
        listed = metadata.get("statistics") or []
        if entry["snapshot-id"] not in _snapshot_ids(metadata):
            return _lost(published_in, replaced, f"snapshot {entry['snapshot-id']} left the Iceberg metadata")
        if any(e["statistics-path"] == entry["statistics-path"] for e in listed):
            published_in = version  # a sync carried it forward
        elif any(e["snapshot-id"] > entry["snapshot-id"] for e in listed):
            return _lost(published_in, replaced, "newer statistics are published")
        elif current.with_statistics:
            return _lost(published_in, replaced, f"metadata version {version} has its statistics already")
        else:
            metadata["statistics"] = [entry]
            if versions.publish(io, versions.statistics_file(metadata_dir, version),
                                json.dumps(metadata, indent=1).encode()):
                published_in = version
                replaced += [e["statistics-path"] for e in listed]
            else:
                continue  # another refresh's statistics version won: look at it
        if not io.exists(versions.metadata_file(metadata_dir, version + 1)):
            return _Attached(True, replaced)
        version += 1
    return _lost(published_in, replaced, "the Iceberg metadata kept moving; a later refresh publishes them")


def _lost(published_in: int | None, replaced: list[str], reason: str) -> _Attached:
    """Not attached now: nowhere (None) unless an earlier round published it (kept, not current)."""
    return _Attached(None if published_in is None else False, [] if published_in is None else replaced, reason)


def carry_forward(table: FileStore | HasStore, metadata_dir: str, previous_version: int, version: int,
                  metadata: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The sync's half of ``_attach``'s handshake: after publishing `version` (`metadata`) from
    the plain v<previous_version>, a statistics version of the previous one that appeared
    meanwhile has its entries carried into `version`'s statistics version. Returns (the
    statistics version of the previous one, the metadata now current), or None if there is none."""
    table = store_of(table)
    io = table.file_io
    path = versions.statistics_file(metadata_dir, previous_version)
    if not io.exists(path):
        return None
    try:
        previous = dict(json.loads(io.read_bytes(path)))
    except FileNotFoundError:
        return None
    entries = carried(previous, metadata["snapshots"])
    if not entries:
        return None
    with_stats = {**metadata, "statistics": entries}
    if not versions.publish(io, versions.statistics_file(metadata_dir, version),
                            json.dumps(with_stats, indent=1).encode()):
        with_stats = dict(json.loads(io.read_bytes(versions.statistics_file(metadata_dir, version))))
    return previous, with_stats


def _delete(table: FileStore, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        table.file_io.delete(path)


def stale(metadata: dict[str, Any]) -> bool:
    """Metadata a commit just published needs statistics: the table has rows and none yet (its
    first rows get them, as Trino's CREATE TABLE AS collects them while writing; a table loaded
    once, never compacted, would stay without), or a compaction published it and total-records
    moved by more than STALE_FRACTION since the snapshot they were computed at."""
    snapshots = {s["snapshot-id"]: s for s in metadata["snapshots"]}
    current = snapshots.get(current_id(metadata))
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


def refresh_after_commit(table: FileStore | HasStore, metadata_dir: str, published: dict[str, Any] | None) -> None:
    """The commit's follow-up (``metadata.iceberg.statistics=compaction``), given the metadata its
    sync published (None: nothing published): statistics for a table's first rows, and a refresh
    when a compaction left them stale. It runs after the metadata is published, in the committing
    thread, and only when bounded: at most AUTO_MAX_VALUES column values to sketch (larger tables:
    ``strata iceberg stats``). No request is made unless a refresh is due. A failure is counted
    (``strata_iceberg_statistics_failures_total``), logged in one warning line and recorded with a
    back-off (BACKOFF_FILE): the next attempt waits 2, 4, 8... snapshots. Never raises."""
    table = store_of(table)
    if published is None or str(table.core.get("metadata.iceberg.statistics")) != "compaction":
        return
    try:
        due = _due(table, published)
    except Exception as exc:  # the back-off record is unreadable: skip this time, say why
        log.warning("table %s: Iceberg statistics not refreshed (%s: %s)", table.identifier, type(exc).__name__, exc)
        return
    if due is None:
        return
    snapshot_id, backoff = due
    try:
        refresh(table, metadata_dir)
    except ImportError:
        log.info("table %s: Iceberg statistics need the datasketches package (the stats extra)", table.identifier)
        return
    except Exception as exc:
        _record_failure(table, snapshot_id, backoff, exc)
        return
    if backoff is not None:
        with contextlib.suppress(Exception):
            table.file_io.delete(f"{table.path}/{BACKOFF_FILE}")


def _due(table: FileStore, published: dict[str, Any]) -> tuple[int, dict[str, Any] | None] | None:
    """(snapshot id, back-off record) when an automatic refresh should run now, else None."""
    if not stale(published):
        return None
    snapshot_id = current_id(published)
    current = next((s for s in published["snapshots"] if s["snapshot-id"] == snapshot_id), None)
    if snapshot_id is None or current is None:
        return None
    columns = sum(1 for f in table.schema.fields if _sketchable(f.type.to_arrow()))
    if _records(current) * columns > AUTO_MAX_VALUES:
        if str(table.identifier) not in _TOO_LARGE:
            _TOO_LARGE.add(str(table.identifier))
            log.info("table %s: %d rows x %d columns is past the automatic statistics bound (%d values); "
                     "run `strata iceberg stats %s`", table.identifier, _records(current), columns,
                     AUTO_MAX_VALUES, table.identifier)
        return None
    try:
        backoff = dict(json.loads(table.file_io.read_bytes(f"{table.path}/{BACKOFF_FILE}")))
    except FileNotFoundError:
        backoff = None
    if backoff is not None and snapshot_id < int(backoff.get("retry-at-snapshot", 0)):
        return None
    return snapshot_id, backoff


def _record_failure(table: FileStore, snapshot_id: int, backoff: dict[str, Any] | None, exc: BaseException) -> None:
    failures = int((backoff or {}).get("failures", 0)) + 1
    retry_at = snapshot_id + min(2 ** failures, MAX_BACKOFF_SNAPSHOTS)
    with contextlib.suppress(Exception):
        metrics.iceberg_statistics_failed(str(table.identifier))
    record = {"time-ms": int(time.time() * 1000), "snapshot-id": snapshot_id, "failures": failures,
              "retry-at-snapshot": retry_at, "error": f"{type(exc).__name__}: {exc}"}
    with contextlib.suppress(Exception):
        table.file_io.write_bytes(f"{table.path}/{BACKOFF_FILE}", json.dumps(record).encode())
    log.warning("table %s: Iceberg statistics refresh failed (%s: %s); %d failure(s) in a row, next attempt "
                "at snapshot %d", table.identifier, type(exc).__name__, exc, failures, retry_at)
