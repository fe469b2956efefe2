"""Deletion vectors (Paimon's merge-on-write): deleted row positions of data files, kept in index
files under ``index/`` and listed by the snapshot's index manifest."""

import numpy as np

from strata.deletionvectors.index_file import DeletionFile, read_vector, read_vectors, write_index_file
from strata.deletionvectors.maintainer import BucketDeletionVectors, deletion_files
from strata.deletionvectors.vector import DeletionVector
from strata.fs.decoded_cache import DecodedFileCache
from strata.fs.file_io import FileIO

_POSITIONS = DecodedFileCache(max_weight=64 << 20)  # weighed in bytes; index files are immutable


def deleted_positions(file_io: FileIO, deletion_file: DeletionFile) -> np.ndarray:
    """The deleted row positions of one data file (sorted int64 numpy array, read-only: cached
    for the other readers of the file, e.g. the parts of a file decoded in parallel)."""
    key = f"{deletion_file.path}#{deletion_file.offset}"
    positions: np.ndarray | None = _POSITIONS.get(key)
    if positions is None:
        positions = read_vector(file_io, deletion_file).positions()
        positions.flags.writeable = False
        _POSITIONS.put(key, positions, positions.nbytes)
    return positions


__all__ = ["BucketDeletionVectors", "DeletionFile", "DeletionVector", "deleted_positions", "deletion_files",
           "read_vector", "read_vectors", "write_index_file"]
