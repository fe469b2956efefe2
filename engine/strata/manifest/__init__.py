"""Paimon manifest metadata: manifest lists, manifest files, index manifests (Avro)."""

from strata.manifest.codec import (
    decode_index_manifest,
    decode_manifest,
    decode_manifest_list,
    encode_index_manifest,
    encode_manifest,
    encode_manifest_list,
)
from strata.manifest.data_file_meta import DataFileMeta, FileSource
from strata.manifest.errors import (
    ManifestCorruptedError,
    ManifestMergeError,
    UnsupportedManifestVersionError,
)
from strata.manifest.index_manifest import (
    INDEX_TYPE_DELETION_VECTORS,
    INDEX_TYPE_HASH,
    DeletionVectorMeta,
    GlobalIndexMeta,
    IndexManifestEntry,
)
from strata.manifest.manifest_entry import FileKind, ManifestEntry, live_files, merge_entries
from strata.manifest.manifest_file_meta import ManifestFileMeta
from strata.manifest.simple_stats import EMPTY_BINARY_ROW, SimpleStats

__all__ = [
    "EMPTY_BINARY_ROW",
    "INDEX_TYPE_DELETION_VECTORS",
    "INDEX_TYPE_HASH",
    "DataFileMeta",
    "DeletionVectorMeta",
    "FileKind",
    "FileSource",
    "GlobalIndexMeta",
    "IndexManifestEntry",
    "ManifestCorruptedError",
    "ManifestEntry",
    "ManifestFileMeta",
    "ManifestMergeError",
    "SimpleStats",
    "UnsupportedManifestVersionError",
    "decode_index_manifest",
    "decode_manifest",
    "decode_manifest_list",
    "encode_index_manifest",
    "encode_manifest",
    "encode_manifest_list",
    "live_files",
    "merge_entries",
]
