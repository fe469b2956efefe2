"""Index manifest entries: hash and deletion-vector index files (``IndexManifestEntry.java``).

Java nests the file fields in an ``IndexFileMeta``; here they sit flat on the entry, in the
order of the Avro row.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.manifest.manifest_entry import FileKind

INDEX_TYPE_HASH = "HASH"
INDEX_TYPE_DELETION_VECTORS = "DELETION_VECTORS"


@dataclass(slots=True)
class DeletionVectorMeta:
    """Where one data file's deletion vector sits inside a DV index file."""

    data_file_name: str  # Avro field f0
    offset: int  # f1
    length: int  # f2
    cardinality: int | None = None  # number of deleted rows, when known


@dataclass(slots=True)
class GlobalIndexMeta:
    """Row range and field of a global index file (``index/GlobalIndexMeta.java``)."""

    row_range_start: int
    row_range_end: int
    index_field_id: int
    extra_field_ids: list[int] | None = None
    index_meta: bytes | None = None
    source_meta: bytes | None = None


@dataclass(slots=True)
class IndexManifestEntry:
    """An index file added to or removed from a (partition, bucket)."""

    kind: FileKind
    partition: bytes  # serialized BinaryRow
    bucket: int
    index_type: str  # INDEX_TYPE_HASH, INDEX_TYPE_DELETION_VECTORS or a global-index type
    file_name: str
    file_size: int
    row_count: int
    dv_ranges: list[DeletionVectorMeta] | None = None  # in file order; DV files only
    external_path: str | None = None
    global_index: GlobalIndexMeta | None = None
