"""Deletion-vector index files under ``index/`` (Paimon's ``DeletionVectorsIndexFile``).

A file is one version byte (1) followed by framed vectors (see vector.py); the index manifest
entry of the file lists, per data file, the vector's offset, length and cardinality. Index files
are immutable, so their bytes are cached process-wide once read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strata.deletionvectors.vector import DeletionVector
from strata.errors import CorruptDataError
from strata.fs import FileIO
from strata.fs.decoded_cache import DecodedFileCache
from strata.manifest.index_manifest import DeletionVectorMeta

VERSION = 1
INDEX_DIR = "index"
_INDEX_BYTES = DecodedFileCache(max_weight=256 << 20)  # weighed in bytes


@dataclass(frozen=True, slots=True)
class DeletionFile:
    """Where one data file's vector sits (Paimon's ``DeletionFile``): a readable address."""

    path: str
    offset: int
    length: int
    cardinality: int | None = None


def index_path(table_path: str, file_name: str, external_path: str | None = None) -> str:
    return external_path or f"{table_path.rstrip('/')}/{INDEX_DIR}/{file_name}"


def write_index_file(file_io: FileIO, path: str,
                     vectors: Mapping[str, DeletionVector]) -> tuple[int, list[DeletionVectorMeta]]:
    """Write the vectors (data file name -> vector) as one index file; (its size, the ranges)."""
    parts = [bytes([VERSION])]
    ranges = []
    position = 1
    for data_file, vector in vectors.items():
        frame, length = vector.serialize()
        ranges.append(DeletionVectorMeta(data_file, position, length, vector.cardinality))
        parts.append(frame)
        position += len(frame)
    data = b"".join(parts)
    file_io.write_bytes(path, data)
    _INDEX_BYTES.put(path, data, len(data))
    return len(data), ranges


def _index_bytes(file_io: FileIO, path: str) -> bytes:
    data: bytes | None = _INDEX_BYTES.get(path)
    if data is None:
        try:
            data = file_io.read_bytes(path)
        except FileNotFoundError:
            raise CorruptDataError(f"deletion-vector index file {path} is missing") from None
        if not data or data[0] != VERSION:
            raise CorruptDataError(f"deletion-vector index file {path} has version "
                                   f"{data[0] if data else 'none'}, expected {VERSION}")
        _INDEX_BYTES.put(path, data, len(data))
    return data


def read_vector(file_io: FileIO, deletion_file: DeletionFile) -> DeletionVector:
    data = _index_bytes(file_io, deletion_file.path)
    return DeletionVector.deserialize(data, deletion_file.offset, deletion_file.length, deletion_file.path)


def read_vectors(file_io: FileIO, path: str, ranges: list[DeletionVectorMeta]) -> dict[str, DeletionVector]:
    """Every vector of one index file, by data file name."""
    data = _index_bytes(file_io, path)
    return {r.data_file_name: DeletionVector.deserialize(data, r.offset, r.length, path) for r in ranges}
