"""Builders of manifest objects for the tests: one fully populated, one with every optional None."""

from __future__ import annotations

import struct

from strata.manifest import (
    EMPTY_BINARY_ROW,
    DataFileMeta,
    DeletionVectorMeta,
    FileKind,
    FileSource,
    GlobalIndexMeta,
    IndexManifestEntry,
    ManifestEntry,
    ManifestFileMeta,
    SimpleStats,
)


def long_row(value: int) -> bytes:
    """A serialized BinaryRow with one BIGINT field (arity, header word, the long)."""
    return struct.pack(">i", 1) + bytes(8) + struct.pack("<q", value)


STATS = SimpleStats(long_row(1), long_row(99), [0, None, 7])


def full_file(name: str = "data-1.parquet", level: int = 1) -> DataFileMeta:
    return DataFileMeta(
        file_name=name, file_size=4096, row_count=100, min_key=long_row(1), max_key=long_row(99),
        key_stats=STATS, value_stats=SimpleStats(long_row(-5), long_row(5), [None]),
        min_sequence_number=10, max_sequence_number=109, schema_id=3, level=level,
        extra_files=["data-1.parquet.index"], creation_time=1_700_000_000_123,
        delete_row_count=4, embedded_index=b"\x01\x02\x00\xff", file_source=FileSource.COMPACT,
        value_stats_cols=["a", "b"], external_path="s3://bucket/ext/data-1.parquet",
        first_row_id=1_000_000, write_cols=["a", "b", "c"], write_cols_sequences=[1, 2, 3])


def bare_file(name: str = "data-2.parquet", level: int = 0) -> DataFileMeta:
    """Required fields only; every optional left at its default (None, extra_files [])."""
    return DataFileMeta(
        file_name=name, file_size=1, row_count=0, min_key=EMPTY_BINARY_ROW,
        max_key=EMPTY_BINARY_ROW, key_stats=SimpleStats.EMPTY, value_stats=SimpleStats.EMPTY,
        min_sequence_number=0, max_sequence_number=0, schema_id=0, level=level)


def entry(kind: FileKind = FileKind.ADD, name: str = "data-1.parquet", bucket: int = 0,
          level: int = 0, partition: bytes = EMPTY_BINARY_ROW) -> ManifestEntry:
    return ManifestEntry(kind, partition, bucket, 2, bare_file(name, level))


def full_meta() -> ManifestFileMeta:
    return ManifestFileMeta("manifest-a-0", 2048, 5, 2, STATS, 1, min_bucket=0, max_bucket=3,
                            min_level=0, max_level=5, min_row_id=0, max_row_id=999)


def bare_meta() -> ManifestFileMeta:
    return ManifestFileMeta("manifest-b-0", 10, 0, 0, SimpleStats.EMPTY, 0)


def dv_index_entry() -> IndexManifestEntry:
    return IndexManifestEntry(
        FileKind.ADD, long_row(7), 1, "DELETION_VECTORS", "index-x-1", 99, 2,
        dv_ranges=[DeletionVectorMeta("data-1.parquet", 1, 26, 3),
                   DeletionVectorMeta("data-2.parquet", 27, 30, None)],
        external_path="s3://bucket/ext/index-x-1")


def global_index_entry() -> IndexManifestEntry:
    return IndexManifestEntry(
        FileKind.DELETE, EMPTY_BINARY_ROW, 0, "btree", "index-g-0", 5, 5,
        global_index=GlobalIndexMeta(0, 99, 4, [5, 6], b"meta", None))


def hash_index_entry() -> IndexManifestEntry:
    return IndexManifestEntry(FileKind.ADD, EMPTY_BINARY_ROW, 0, "HASH", "index-h-0", 8, 2)
