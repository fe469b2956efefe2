"""The Iceberg delete files of a deletion-vector table: a position-delete Parquet file per data
file with a vector (format 2), or a Puffin file of ``deletion-vector-v1`` blobs per deletion-vector
index file (format 3). Either is written once and reused while its index file lives."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from strata.deletionvectors import read_vectors
from strata.deletionvectors.index_file import index_path
from strata.iceberg import manifests as im
from strata.iceberg import puffin
from strata.iceberg.location import uri
from strata.iceberg.versions import current_id, current_snapshot
from strata.manifest.index_manifest import INDEX_TYPE_DELETION_VECTORS, IndexManifestEntry
from strata.manifest.manifest_entry import ManifestEntry
from strata.snapshot.snapshot import Snapshot
from strata.store import FileStore


def previous_deletes(store: FileStore, spec: Sequence[im.PartitionField],
                     previous: dict[str, Any] | None) -> list[im.DataFile]:
    """The delete files the current snapshot of `previous` lists."""
    if previous is None or current_id(previous) is None:
        return []
    return im.listed_files(store.file_io, current_snapshot(previous)["manifest-list"], spec, im.DELETES)


class DeleteFiles:
    """Writes the delete files of one sync into `metadata_dir`, under the sync's `prefix`, and
    records each path it writes in `written` (deleted if the sync's version is not published).
    `path` spells a data file's path as the metadata does; `partition` turns Paimon's partition
    bytes into the Iceberg partition tuple."""

    def __init__(self, store: FileStore, metadata_dir: str, spec: Sequence[im.PartitionField], prefix: str,
                 written: list[str], path: Callable[[ManifestEntry], str],
                 partition: Callable[[bytes], tuple[Any, ...]]):
        self.store = store
        self.dir = metadata_dir
        self.spec = spec
        self.prefix = prefix
        self.written = written
        self.path = path
        self.partition = partition

    def for_snapshot(self, snapshot: Snapshot, visible: Sequence[ManifestEntry], previous: dict[str, Any] | None,
                     format_version: int) -> list[im.DataFile]:
        """The delete files of the snapshot's deletion vectors of `visible` files (`previous`: the
        metadata before, whose delete files are reused)."""
        index = self._index(snapshot)
        if not index:
            return []
        paths = {(e.partition, e.bucket, e.file.file_name): self.path(e) for e in visible}
        known = previous_deletes(self.store, self.spec, previous)
        if format_version >= 3:
            return self._deletion_vectors(index, paths, known)
        return self._position_deletes(index, paths, known)

    def _index(self, snapshot: Snapshot) -> list[IndexManifestEntry]:
        return [e for e in self.store.manifest_store.read_index_manifest(snapshot.index_manifest)
                if e.index_type == INDEX_TYPE_DELETION_VECTORS and e.dv_ranges]

    def _vectors(self, entry: IndexManifestEntry) -> dict[str, Any]:
        return read_vectors(self.store.file_io, index_path(self.store.path, entry.file_name, entry.external_path),
                            entry.dv_ranges or [])

    def _position_deletes(self, index: list[IndexManifestEntry], paths: dict[tuple[bytes, int, str], str],
                          previous: list[im.DataFile]) -> list[im.DataFile]:
        """Format 2: one position-delete file per data file with a deletion vector (so that a
        reader's split reads only its own file's deletes), reused while the index file holding the
        vector lives."""
        known = {f.path: f for f in previous}
        out = []
        for entry in index:
            targets = {r.data_file_name: (paths[key], uri(f"{self.dir}/{entry.file_name}-{_stem(r.data_file_name)}"
                                                              f"-deletes.parquet"))
                       for r in entry.dv_ranges or [] if (key := (entry.partition, entry.bucket, r.data_file_name))
                       in paths}
            # reused only when written for the data path as it is spelled now
            reused = {name: known[target] for name, (path, target) in targets.items()
                      if target in known and known[target].referenced_data_file == path}
            vectors = {} if len(reused) == len(targets) else self._vectors(entry)
            for name, (path, target) in targets.items():
                out.append(reused.get(name) or im.position_delete_file(
                    self.store.file_io, target, path, vectors[name].positions(), self.partition(entry.partition)))
        return out

    def _deletion_vectors(self, index: list[IndexManifestEntry], paths: dict[tuple[bytes, int, str], str],
                          previous: list[im.DataFile]) -> list[im.DataFile]:
        """Format 3: one Puffin file per deletion-vector index file, holding a deletion-vector-v1
        blob for each of its visible data files, and one manifest entry per blob (at most one
        vector per data file: an index entry holds one per file). A Puffin file is reused while its
        index file lives and its blobs reference the same data paths."""
        known: dict[str, dict[str, im.DataFile]] = {}
        for f in previous:
            if f.file_format == "PUFFIN" and f.referenced_data_file is not None:
                known.setdefault(f.path, {})[f.referenced_data_file] = f
        out: list[im.DataFile] = []
        for entry in index:
            targets = [(path, r.data_file_name) for r in entry.dv_ranges or []
                       if (path := paths.get((entry.partition, entry.bucket, r.data_file_name))) is not None]
            if not targets:
                continue
            stem = f"{self.dir}/{entry.file_name}-"
            wanted = {path for path, _ in targets}
            reused = next((files for p, files in known.items() if p.startswith(stem) and set(files) == wanted), None)
            if reused is not None:
                out += [reused[path] for path, _ in targets]
                continue
            vectors = self._vectors(entry)
            data, blobs = puffin.write_puffin([(path, vectors[name]) for path, name in targets])
            target = f"{stem}{self.prefix}.puffin"
            self.written.append(target)
            self.store.file_io.write_bytes(target, data)
            partition = self.partition(entry.partition)
            for b in blobs:
                # the path bounds too (as a position-delete file's): readers that pair deletes with
                # data files by them (pyiceberg) give each data file only its own vector
                bound = {im.FILE_PATH_ID: b.referenced_data_file.encode()}
                out.append(im.DataFile(1, target, partition, b.cardinality, len(data), {}, bound, dict(bound),
                                       b.referenced_data_file, "PUFFIN", None, b.offset, b.length))
        return out


def _stem(file_name: str) -> str:
    return file_name.rsplit(".", 1)[0]
