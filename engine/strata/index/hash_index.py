"""HASH index files of dynamic-bucket tables (Paimon's ``HashIndexFile``).

One file per (partition, bucket) under ``index/``: the int32 hash codes of every key the bucket
holds (``BinaryRow.hashCode()`` of the trimmed primary key), each as 4 big-endian bytes, no
header. Index files are immutable, so decoded arrays are cached process-wide.
"""

from __future__ import annotations

import numpy as np

from strata.errors import CorruptDataError
from strata.fs import FileIO
from strata.fs.decoded_cache import DecodedFileCache
from strata.manifest.index_manifest import INDEX_TYPE_HASH, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind

_BIG_ENDIAN_INT32 = np.dtype(">i4")
_HASHES = DecodedFileCache(max_weight=256 << 20)  # weighed in bytes


def hash_index_path(table_path: str, entry: IndexManifestEntry) -> str:
    return entry.external_path or f"{table_path.rstrip('/')}/index/{entry.file_name}"


def read_hashes(file_io: FileIO, table_path: str, entry: IndexManifestEntry) -> np.ndarray:
    """The hash codes (int32) a HASH index file lists, in file order."""
    path = hash_index_path(table_path, entry)
    cached: np.ndarray | None = _HASHES.get(path)
    if cached is not None:
        return cached
    try:
        data = file_io.read_bytes(path)
    except FileNotFoundError:
        raise CorruptDataError(f"hash index file {path} is missing") from None
    if len(data) % 4:
        raise CorruptDataError(f"hash index file {path} has {len(data)} bytes, not a multiple of 4")
    hashes = np.frombuffer(data, dtype=_BIG_ENDIAN_INT32).astype(np.int32)
    hashes.flags.writeable = False
    _HASHES.put(path, hashes, hashes.nbytes)
    return hashes


def hash_index_entry(file_name: str, partition: bytes, bucket: int, count: int) -> IndexManifestEntry:
    """The ADD entry of a HASH index file of `count` hashes (known before the file is written)."""
    return IndexManifestEntry(FileKind.ADD, partition, bucket, INDEX_TYPE_HASH, file_name, 4 * count, count)


def write_hash_index(file_io: FileIO, table_path: str, file_name: str, partition: bytes, bucket: int,
                     hashes: np.ndarray) -> IndexManifestEntry:
    """Write one bucket's hash codes as a new index file; its ADD entry."""
    frozen = np.array(hashes, dtype=np.int32)  # a copy: the cache must not see the caller's array change
    frozen.flags.writeable = False
    index_dir = f"{table_path.rstrip('/')}/index"
    path = f"{index_dir}/{file_name}"
    # written as data files are: a new name no snapshot lists until the commit that adds it, so
    # neither a temporary file nor an fsync (a commit rewrites every touched bucket's whole file)
    file_io.mkdirs(index_dir)
    with file_io.arrow_fs()[0].open_output_stream(file_io.arrow_path(path)) as out:
        out.write(frozen.astype(_BIG_ENDIAN_INT32))
    _HASHES.put(path, frozen, frozen.nbytes)
    return hash_index_entry(file_name, partition, bucket, len(frozen))
