"""Deletion vectors (Paimon's merge-on-write): deleted row positions of data files, kept in index
files under ``index/`` and listed by the snapshot's index manifest."""

import numpy as np

from strata.deletionvectors.index_file import DeletionFile, read_vector, read_vectors, write_index_file
from strata.deletionvectors.maintainer import BucketDeletionVectors, deletion_files
from strata.deletionvectors.vector import DeletionVector
from strata.fs.file_io import FileIO


def deleted_positions(file_io: FileIO, deletion_file: DeletionFile) -> np.ndarray:
    """The deleted row positions of one data file (sorted int64 numpy array)."""
    return read_vector(file_io, deletion_file).positions()


__all__ = ["BucketDeletionVectors", "DeletionFile", "DeletionVector", "deleted_positions", "deletion_files",
           "read_vector", "read_vectors", "write_index_file"]
