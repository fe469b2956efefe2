"""The deletion vectors of one (partition, bucket) a writer keeps (Paimon's BucketedDvMaintainer).

A writer restores the vectors of its bucket from the live index files of the latest snapshot,
marks rows deleted as compactions supersede them (or a delete selects them), drops the vectors of
files it rewrites, and at each commit replaces index files by new ones:

- a bucketed table keeps one index file per bucket: the commit DELETEs it and ADDs the new one;
- a table without buckets (append, ``bucket = -1``) keeps several per partition, rolled at
  ``deletion-vectors.index-file.target-size``; a commit rewrites only the index files holding a
  vector it changed (their other vectors copied as they are) and puts new vectors in new files
  (Paimon's UnawareAppendDeletionFileMaintainer).

The commit refuses the change if an index file it replaces is no longer live (another writer
replaced it meanwhile): concurrent deletes conflict, never silently lose one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from strata.deletionvectors.index_file import DeletionFile, index_path, read_vectors, write_index_file
from strata.deletionvectors.vector import DeletionVector
from strata.fs import FileIO
from strata.io.paths import PathFactory
from strata.manifest.index_manifest import INDEX_TYPE_DELETION_VECTORS, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind


class BucketDeletionVectors:
    def __init__(self, file_io: FileIO, paths: PathFactory, partition: bytes, bucket: int,
                 restored: Sequence[IndexManifestEntry], bitmap64: bool, target_size: int | None = None):
        """`target_size`: roll index files at this size (tables without buckets); None: one file."""
        self.file_io = file_io
        self.paths = paths
        self.partition = partition
        self.bucket = bucket
        self.bitmap64 = bitmap64
        self.target_size = target_size
        self.live = [e for e in restored if e.index_type == INDEX_TYPE_DELETION_VECTORS]
        self.vectors: dict[str, DeletionVector] = {}
        self.origin: dict[str, str] = {}  # data file -> the live index file holding its vector
        for entry in self.live:
            path = index_path(paths.table_path, entry.file_name, entry.external_path)
            found = read_vectors(file_io, path, entry.dv_ranges or [])
            self.vectors.update(found)
            self.origin.update(dict.fromkeys(found, entry.file_name))
        self.touched: set[str] = set()  # live index files holding a vector that changed
        self.modified = False

    def positions_of(self, data_file: str) -> np.ndarray | None:
        return self.vectors[data_file].positions() if self.has_deletions(data_file) else None

    def has_deletions(self, data_file: str) -> bool:
        vector = self.vectors.get(data_file)
        return vector is not None and len(vector) > 0

    def deleted_count(self, data_file: str) -> int:
        """How many rows of the data file its vector marks (0: none)."""
        vector = self.vectors.get(data_file)
        return 0 if vector is None else len(vector)

    def mark(self, data_file: str, positions: np.ndarray) -> None:
        if len(positions) == 0:
            return
        vector = self.vectors.get(data_file)
        if vector is None:
            vector = self.vectors[data_file] = DeletionVector(self.bitmap64)
        before = len(vector)
        vector.add(positions)
        if len(vector) != before:
            self._changed(data_file)

    def remove(self, data_file: str) -> None:
        if self.vectors.pop(data_file, None) is not None:
            self._changed(data_file)

    def _changed(self, data_file: str) -> None:
        self.modified = True
        if data_file in self.origin:
            self.touched.add(self.origin[data_file])

    def prepare_commit(self) -> list[IndexManifestEntry]:
        """The index changes of this commit (DELETE the replaced files, ADD their replacement)."""
        if not self.modified:
            return []
        self.modified = False
        if self.target_size is None:  # one index file per bucket: all of them are replaced
            replaced, kept = self.live, []
            rewritten = self.vectors
        else:  # only the index files holding a changed vector, and new vectors
            replaced = [e for e in self.live if e.file_name in self.touched]
            kept = [e for e in self.live if e.file_name not in self.touched]
            rewritten = {name: v for name, v in self.vectors.items()
                         if name not in self.origin or self.origin[name] in self.touched}
        self.touched = set()
        changes = [_as_kind(e, FileKind.DELETE) for e in replaced]
        added = [self._write(group) for group in self._groups(rewritten) if group]
        self.live = kept + added
        for entry in added:
            self.origin.update({r.data_file_name: entry.file_name for r in entry.dv_ranges or []})
        for name in [n for n in self.origin if n not in self.vectors]:
            del self.origin[name]
        return changes + added

    def _groups(self, vectors: dict[str, DeletionVector]) -> list[dict[str, DeletionVector]]:
        vectors = {name: v for name, v in vectors.items() if len(v)}
        if self.target_size is None:
            return [vectors]
        groups: list[dict[str, DeletionVector]] = [{}]
        size = 0
        for name, vector in vectors.items():
            if size > self.target_size:
                groups.append({})
                size = 0
            groups[-1][name] = vector
            size += len(vector.serialize()[0])
        return groups

    def _write(self, vectors: dict[str, DeletionVector]) -> IndexManifestEntry:
        name = self.paths.new_index_file_name()
        size, ranges = write_index_file(self.file_io, f"{self.paths.index_dir()}/{name}", vectors)
        return IndexManifestEntry(FileKind.ADD, self.partition, self.bucket, INDEX_TYPE_DELETION_VECTORS,
                                  name, size, len(ranges), ranges)


def _as_kind(entry: IndexManifestEntry, kind: FileKind) -> IndexManifestEntry:
    return IndexManifestEntry(kind, entry.partition, entry.bucket, entry.index_type, entry.file_name,
                              entry.file_size, entry.row_count, entry.dv_ranges, entry.external_path,
                              entry.global_index)


def deletion_files(table_path: str,
                   entries: Sequence[IndexManifestEntry]) -> dict[tuple[bytes, int], dict[str, DeletionFile]]:
    """(partition, bucket) -> data file name -> where its vector is, from live index entries."""
    out: dict[tuple[bytes, int], dict[str, DeletionFile]] = {}
    for entry in entries:
        if entry.index_type != INDEX_TYPE_DELETION_VECTORS:
            continue
        path = index_path(table_path, entry.file_name, entry.external_path)
        files = out.setdefault((entry.partition, entry.bucket), {})
        for r in entry.dv_ranges or []:
            files[r.data_file_name] = DeletionFile(path, r.offset, r.length, r.cardinality)
    return out
