"""Encode and decode manifest files, manifest lists and index manifests (Avro).

Writers use the Java-exact schemas of ``schemas.py`` and compress with zstd by default, like
Paimon's ``manifest.compression``. Readers decode with each file's own writer schema, so files
from Java, pypaimon (other record names, extra fields) and older versions (fewer nullable
fields) all read; a missing nullable field reads as None.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

import fastavro
import pyarrow as pa
import pyarrow.compute as pc

from strata.manifest import avro_arrow
from strata.manifest.avro_container import (
    decode_records,
    read_blocks,
    read_container,
    strip_logical_types,
    write_container,
)
from strata.manifest.data_file_meta import DataFileMeta, FileSource
from strata.manifest.errors import ManifestCorruptedError, UnsupportedManifestVersionError
from strata.manifest.index_manifest import DeletionVectorMeta, GlobalIndexMeta, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind, ManifestEntry
from strata.manifest.manifest_file_meta import ManifestFileMeta
from strata.manifest.schemas import (
    INDEX_MANIFEST_ENTRY_SCHEMA,
    MANIFEST_ENTRY_SCHEMA,
    MANIFEST_FILE_META_SCHEMA,
)
from strata.manifest.simple_stats import EMPTY_BINARY_ROW, SimpleStats

__all__ = [
    "ManifestCorruptedError",
    "decode_index_manifest",
    "decode_manifest",
    "decode_manifest_list",
    "encode_index_manifest",
    "encode_manifest",
    "encode_manifest_list",
]

# `_VERSION`: permanent format identifiers (ManifestEntrySerializer, ManifestFileMetaSerializer,
# IndexManifestEntrySerializer); they do not change when nullable fields are added.
MANIFEST_VERSION = 2
MANIFEST_LIST_VERSION = 2
INDEX_MANIFEST_VERSION = 1

# Encoding uses the schemas without logical types so that creation times stay plain longs.
_ENTRY_WRITER = fastavro.parse_schema(strip_logical_types(MANIFEST_ENTRY_SCHEMA))
_META_WRITER = fastavro.parse_schema(strip_logical_types(MANIFEST_FILE_META_SCHEMA))
_INDEX_WRITER = fastavro.parse_schema(strip_logical_types(INDEX_MANIFEST_ENTRY_SCHEMA))

Record = dict[str, Any]
T = TypeVar("T")
Decoder = Literal["auto", "polars", "fastavro"]
# how manifests decode unless a call says otherwise; "fastavro" opts out of polars
DEFAULT_DECODER: Decoder = "auto"


# -- public API -----------------------------------------------------------------------------

def encode_manifest(entries: Iterable[ManifestEntry], compression: str = "zstd",
                    level: int | None = None) -> bytes:
    """A manifest file holding ``entries`` in order."""
    records = (_entry_to_avro(e) for e in entries)
    return write_container(MANIFEST_ENTRY_SCHEMA, _ENTRY_WRITER, records, compression, level)


def decode_manifest(data: bytes, *, expected_count: int | None = None,
                    source: str = "manifest", decoder: Decoder | None = None) -> list[ManifestEntry]:
    """All entries of a manifest file.

    An Avro file cut exactly at a block boundary still parses; pass ``expected_count`` (the
    ManifestFileMeta's added + deleted file counts) to catch that too. ``source`` names the file
    in error messages. ``decoder`` "auto" (the default, ``DEFAULT_DECODER``) decodes with polars
    when it is installed, can read the file, and is loaded already or worth loading for it
    (``avro_arrow.MIN_RECORDS_TO_LOAD``), else with fastavro; "polars" and "fastavro" force one.
    """
    decoder = decoder or DEFAULT_DECODER
    schema_json, blocks = read_blocks(data, source)
    entries = None
    if decoder != "fastavro":
        entries = _decode_columnar(schema_json, blocks, source, force=decoder == "polars")
        if entries is None and decoder == "polars":
            raise ValueError(f"{source}: polars cannot decode this file (installed: {avro_arrow.available()})")
    if entries is None:
        with gc_paused():
            entries = _convert(decode_records(schema_json, blocks, source), _entry_from_avro, source)
    if expected_count is not None and len(entries) != expected_count:
        raise ManifestCorruptedError(
            f"{source}: holds {len(entries)} entries, its manifest list says {expected_count}")
    return entries


def encode_manifest_list(metas: Iterable[ManifestFileMeta], compression: str = "zstd",
                         level: int | None = None) -> bytes:
    """A manifest list file holding ``metas`` in order."""
    records = (_meta_to_avro(m) for m in metas)
    return write_container(MANIFEST_FILE_META_SCHEMA, _META_WRITER, records, compression, level)


def decode_manifest_list(data: bytes, *, source: str = "manifest list") -> list[ManifestFileMeta]:
    """All lines of a manifest list file."""
    return _decode(data, _meta_from_avro, source)


def encode_index_manifest(entries: Iterable[IndexManifestEntry], compression: str = "zstd",
                          level: int | None = None) -> bytes:
    """An index manifest file holding ``entries`` in order."""
    records = (_index_to_avro(e) for e in entries)
    return write_container(INDEX_MANIFEST_ENTRY_SCHEMA, _INDEX_WRITER, records, compression, level)


def decode_index_manifest(data: bytes, *,
                          source: str = "index manifest") -> list[IndexManifestEntry]:
    """All entries of an index manifest file."""
    return _decode(data, _index_from_avro, source)


# -- helpers --------------------------------------------------------------------------------

@contextmanager
def gc_paused() -> Iterator[None]:
    """Decoding allocates dozens of acyclic objects per entry; cyclic GC passes over them
    would cost up to half the decode time of a large manifest (and a quarter of planning a
    table of 100,000 files, whose entries outlive the decode)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decode(data: bytes, convert: Callable[[Record], T], source: str) -> list[T]:
    with gc_paused():
        return _convert(read_container(data, source), convert, source)


def _convert(records: list[Any], convert: Callable[[Record], T], source: str) -> list[T]:
    """Apply ``convert`` to each record, turning any fault into a ManifestCorruptedError."""
    out: list[T] = []
    try:
        for record in records:
            out.append(convert(record))
    except ManifestCorruptedError as exc:
        raise type(exc)(f"{source}: record {len(out)}: {exc}") from exc
    except KeyError as exc:
        raise ManifestCorruptedError(f"{source}: record {len(out)}: missing field {exc}") from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise ManifestCorruptedError(f"{source}: record {len(out)}: bad value: {exc}") from exc
    return out


def _check_version(record: Record, expected: int) -> None:
    version = record["_VERSION"]
    if version != expected:
        raise UnsupportedManifestVersionError(
            f"unsupported _VERSION {version} (this reader knows {expected})")


def _stats_to_avro(stats: SimpleStats) -> Record:
    return {"_MIN_VALUES": stats.min_values, "_MAX_VALUES": stats.max_values,
            "_NULL_COUNTS": stats.null_counts}


def _stats_from_avro(record: Record) -> SimpleStats:
    mins, maxs = record["_MIN_VALUES"], record["_MAX_VALUES"]
    nulls = record.get("_NULL_COUNTS") or []  # Java never writes null; read it as "no counts"
    if not nulls and mins == EMPTY_BINARY_ROW and maxs == EMPTY_BINARY_ROW:
        return SimpleStats.EMPTY  # most files' key stats: share one object
    return SimpleStats(mins, maxs, nulls)


# -- manifest entries -----------------------------------------------------------------------

def _file_to_avro(f: DataFileMeta) -> Record:
    return {
        "_FILE_NAME": f.file_name, "_FILE_SIZE": f.file_size, "_ROW_COUNT": f.row_count,
        "_MIN_KEY": f.min_key, "_MAX_KEY": f.max_key,
        "_KEY_STATS": _stats_to_avro(f.key_stats), "_VALUE_STATS": _stats_to_avro(f.value_stats),
        "_MIN_SEQUENCE_NUMBER": f.min_sequence_number,
        "_MAX_SEQUENCE_NUMBER": f.max_sequence_number,
        "_SCHEMA_ID": f.schema_id, "_LEVEL": f.level, "_EXTRA_FILES": f.extra_files,
        "_CREATION_TIME": f.creation_time, "_DELETE_ROW_COUNT": f.delete_row_count,
        "_EMBEDDED_FILE_INDEX": f.embedded_index,
        "_FILE_SOURCE": None if f.file_source is None else int(f.file_source),
        "_VALUE_STATS_COLS": f.value_stats_cols, "_EXTERNAL_PATH": f.external_path,
        "_FIRST_ROW_ID": f.first_row_id, "_WRITE_COLS": f.write_cols,
        "_WRITE_COLS_SEQUENCES": f.write_cols_sequences,
    }


# enum members by stored value: a dict lookup costs a tenth of the enum's call, once per entry
_FILE_SOURCES: dict[int | None, FileSource | None] = {None: None, **{int(s): s for s in FileSource}}
_FILE_KINDS: dict[int, FileKind] = {int(k): k for k in FileKind}


def _member(members: Mapping[Any, T], value: Any, what: str) -> T:
    try:
        return members[value]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {what} {value!r}") from None


def _file_from_avro(r: Record) -> DataFileMeta:
    get = r.get
    return DataFileMeta(
        r["_FILE_NAME"], r["_FILE_SIZE"], r["_ROW_COUNT"], r["_MIN_KEY"], r["_MAX_KEY"],
        _stats_from_avro(r["_KEY_STATS"]), _stats_from_avro(r["_VALUE_STATS"]),
        r["_MIN_SEQUENCE_NUMBER"], r["_MAX_SEQUENCE_NUMBER"], r["_SCHEMA_ID"], r["_LEVEL"],
        r["_EXTRA_FILES"], get("_CREATION_TIME"), get("_DELETE_ROW_COUNT"),
        get("_EMBEDDED_FILE_INDEX"), _member(_FILE_SOURCES, get("_FILE_SOURCE"), "_FILE_SOURCE"),
        get("_VALUE_STATS_COLS"), get("_EXTERNAL_PATH"), get("_FIRST_ROW_ID"),
        get("_WRITE_COLS"), get("_WRITE_COLS_SEQUENCES"))


def _entry_to_avro(e: ManifestEntry) -> Record:
    return {"_VERSION": MANIFEST_VERSION, "_KIND": int(e.kind), "_PARTITION": e.partition,
            "_BUCKET": e.bucket, "_TOTAL_BUCKETS": e.total_buckets, "_FILE": _file_to_avro(e.file)}


def _entry_from_avro(r: Record) -> ManifestEntry:
    _check_version(r, MANIFEST_VERSION)
    return ManifestEntry(_member(_FILE_KINDS, r["_KIND"], "_KIND"), r["_PARTITION"], r["_BUCKET"], r["_TOTAL_BUCKETS"],
                         _file_from_avro(r["_FILE"]))


def _decode_columnar(schema_json: str, blocks: list[tuple[int, bytes]], source: str,
                     force: bool) -> list[ManifestEntry] | None:
    table = avro_arrow.decode_table(schema_json, blocks, force=force)
    if table is None:
        return None
    with gc_paused():
        try:
            return _entries_from_table(table)
        except KeyError as exc:
            raise ManifestCorruptedError(f"{source}: record 0: missing field {exc}") from exc
        except ManifestCorruptedError as exc:
            raise type(exc)(f"{source}: {exc}") from exc
        except (TypeError, ValueError, AttributeError, pa.ArrowException):
            return None  # a shape this path does not know: fastavro reads it or names the fault


def _entries_from_table(table: pa.Table) -> list[ManifestEntry]:
    """The entries of a decoded manifest, built column by column (the columnar twin of
    ``_entry_from_avro``: same checks, same objects). Only pyarrow calls that take no Python
    values: converting one would import pandas, a third of a cold planning's time."""
    def column(name: str) -> pa.ChunkedArray:
        if name not in table.column_names:
            raise KeyError(name)
        return table.column(name)

    _members(column("_VERSION").to_pylist(), {MANIFEST_VERSION: MANIFEST_VERSION}, "_VERSION")
    file = column("_FILE").combine_chunks()
    names = {field.name for field in file.type}

    def required(name: str) -> list[Any]:
        if name not in names:
            raise KeyError(name)
        return pc.struct_field(file, name).to_pylist()

    def optional(name: str) -> list[Any]:
        return pc.struct_field(file, name).to_pylist() if name in names else [None] * len(file)

    files = map(DataFileMeta, required("_FILE_NAME"), required("_FILE_SIZE"), required("_ROW_COUNT"),
                required("_MIN_KEY"), required("_MAX_KEY"), _stats_column(file, "_KEY_STATS"),
                _stats_column(file, "_VALUE_STATS"), required("_MIN_SEQUENCE_NUMBER"),
                required("_MAX_SEQUENCE_NUMBER"), required("_SCHEMA_ID"), required("_LEVEL"),
                required("_EXTRA_FILES"), optional("_CREATION_TIME"), optional("_DELETE_ROW_COUNT"),
                optional("_EMBEDDED_FILE_INDEX"), _members(optional("_FILE_SOURCE"), _FILE_SOURCES, "_FILE_SOURCE"),
                optional("_VALUE_STATS_COLS"), optional("_EXTERNAL_PATH"), optional("_FIRST_ROW_ID"),
                optional("_WRITE_COLS"), optional("_WRITE_COLS_SEQUENCES"))
    kinds = _members(column("_KIND").to_pylist(), _FILE_KINDS, "_KIND")
    return list(map(ManifestEntry, kinds, column("_PARTITION").to_pylist(), column("_BUCKET").to_pylist(),
                    column("_TOTAL_BUCKETS").to_pylist(), files))


def _members(values: list[Any], members: Mapping[Any, T], name: str) -> list[T]:
    """``members[v]`` for each value, or raise naming the first record with an unknown one."""
    unknown = set(values).difference(members)
    if unknown:
        first = next(i for i, value in enumerate(values) if value in unknown)
        if name == "_VERSION":
            raise UnsupportedManifestVersionError(
                f"record {first}: unsupported _VERSION {values[first]} (this reader knows {MANIFEST_VERSION})")
        raise ManifestCorruptedError(f"record {first}: bad value: unknown {name} {values[first]!r}")
    return [members[value] for value in values]


def _stats_column(file: pa.StructArray, name: str) -> list[SimpleStats]:
    stats = pc.struct_field(file, name)
    mins = pc.struct_field(stats, "_MIN_VALUES").to_pylist()
    maxs = pc.struct_field(stats, "_MAX_VALUES").to_pylist()
    nulls = pc.struct_field(stats, "_NULL_COUNTS").to_pylist()
    empty = EMPTY_BINARY_ROW
    # most files' key stats are empty: share one object, as _stats_from_avro does
    return [SimpleStats.EMPTY if not counts and lo == empty and hi == empty else SimpleStats(lo, hi, counts or [])
            for lo, hi, counts in zip(mins, maxs, nulls, strict=True)]


# -- manifest list --------------------------------------------------------------------------

def _meta_to_avro(m: ManifestFileMeta) -> Record:
    return {
        "_VERSION": MANIFEST_LIST_VERSION, "_FILE_NAME": m.file_name, "_FILE_SIZE": m.file_size,
        "_NUM_ADDED_FILES": m.num_added_files, "_NUM_DELETED_FILES": m.num_deleted_files,
        "_PARTITION_STATS": _stats_to_avro(m.partition_stats), "_SCHEMA_ID": m.schema_id,
        "_MIN_BUCKET": m.min_bucket, "_MAX_BUCKET": m.max_bucket,
        "_MIN_LEVEL": m.min_level, "_MAX_LEVEL": m.max_level,
        "_MIN_ROW_ID": m.min_row_id, "_MAX_ROW_ID": m.max_row_id,
    }


def _meta_from_avro(r: Record) -> ManifestFileMeta:
    _check_version(r, MANIFEST_LIST_VERSION)
    get = r.get
    return ManifestFileMeta(
        r["_FILE_NAME"], r["_FILE_SIZE"], r["_NUM_ADDED_FILES"], r["_NUM_DELETED_FILES"],
        _stats_from_avro(r["_PARTITION_STATS"]), r["_SCHEMA_ID"],
        get("_MIN_BUCKET"), get("_MAX_BUCKET"), get("_MIN_LEVEL"), get("_MAX_LEVEL"),
        get("_MIN_ROW_ID"), get("_MAX_ROW_ID"))


# -- index manifest -------------------------------------------------------------------------

def _dv_to_avro(dv: DeletionVectorMeta) -> Record:
    return {"f0": dv.data_file_name, "f1": dv.offset, "f2": dv.length,
            "_CARDINALITY": dv.cardinality}


def _dv_from_avro(r: Record | None) -> DeletionVectorMeta:
    if r is None:
        raise ManifestCorruptedError("null element in _DELETIONS_VECTORS_RANGES")
    return DeletionVectorMeta(r["f0"], r["f1"], r["f2"], r.get("_CARDINALITY"))


def _global_to_avro(g: GlobalIndexMeta | None) -> Record | None:
    if g is None:
        return None
    return {"_ROW_RANGE_START": g.row_range_start, "_ROW_RANGE_END": g.row_range_end,
            "_INDEX_FIELD_ID": g.index_field_id, "_EXTRA_FIELD_IDS": g.extra_field_ids,
            "_INDEX_META": g.index_meta, "_SOURCE_META": g.source_meta}


def _global_from_avro(r: Record | None) -> GlobalIndexMeta | None:
    if r is None:
        return None
    return GlobalIndexMeta(r["_ROW_RANGE_START"], r["_ROW_RANGE_END"], r["_INDEX_FIELD_ID"],
                           r.get("_EXTRA_FIELD_IDS"), r.get("_INDEX_META"), r.get("_SOURCE_META"))


def _index_to_avro(e: IndexManifestEntry) -> Record:
    dvs = None if e.dv_ranges is None else [_dv_to_avro(dv) for dv in e.dv_ranges]
    return {
        "_VERSION": INDEX_MANIFEST_VERSION, "_KIND": int(e.kind), "_PARTITION": e.partition,
        "_BUCKET": e.bucket, "_INDEX_TYPE": e.index_type, "_FILE_NAME": e.file_name,
        "_FILE_SIZE": e.file_size, "_ROW_COUNT": e.row_count, "_DELETIONS_VECTORS_RANGES": dvs,
        "_EXTERNAL_PATH": e.external_path, "_GLOBAL_INDEX": _global_to_avro(e.global_index),
    }


def _index_from_avro(r: Record) -> IndexManifestEntry:
    _check_version(r, INDEX_MANIFEST_VERSION)
    dvs = r.get("_DELETIONS_VECTORS_RANGES")
    return IndexManifestEntry(
        FileKind(r["_KIND"]), r["_PARTITION"], r["_BUCKET"], r["_INDEX_TYPE"], r["_FILE_NAME"],
        r["_FILE_SIZE"], r["_ROW_COUNT"], None if dvs is None else [_dv_from_avro(d) for d in dvs],
        r.get("_EXTERNAL_PATH"), _global_from_avro(r.get("_GLOBAL_INDEX")))
