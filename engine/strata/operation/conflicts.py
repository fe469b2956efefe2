"""Conflict detection before publishing a snapshot (ConflictDetection.checkConflicts)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise

from strata.errors import CommitConflictError
from strata.manifest.index_manifest import INDEX_TYPE_DELETION_VECTORS, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind, ManifestEntry

KeyOrder = Callable[[bytes], tuple]


def check_conflicts(live: Sequence[ManifestEntry], changes: Sequence[ManifestEntry],
                    key_order: KeyOrder | None, where: str) -> None:
    """Fail if the change deletes a file that is not live, leaves a partition with two bucket
    counts, or (primary-key tables, `key_order` given) two overlapping files in one level >= 1."""
    state = {e.identifier(): e for e in live}
    for entry in changes:
        if entry.kind == FileKind.DELETE:
            if state.pop(entry.identifier(), None) is None:
                raise CommitConflictError(
                    f"trying to delete file {entry.file.file_name} of {where} which is not previously "
                    "added (a concurrent commit removed it); the writer must restart from the latest snapshot")
        else:
            state[entry.identifier()] = entry
    _check_bucket_counts(state.values(), where)
    if key_order is not None:
        _check_lsm_overlap(state.values(), key_order, where)


def _check_bucket_counts(entries: Iterable[ManifestEntry], where: str) -> None:
    counts: dict[bytes, set[int]] = defaultdict(set)
    for entry in entries:
        counts[entry.partition].add(entry.total_buckets)
    for buckets in counts.values():
        if len(buckets) > 1:
            raise CommitConflictError(
                f"a partition of {where} would mix total bucket counts {sorted(buckets)}; "
                "rescale the partition with an overwrite")


def _check_lsm_overlap(entries: Iterable[ManifestEntry], key_order: KeyOrder, where: str) -> None:
    runs: dict[tuple[bytes, int, int], list[ManifestEntry]] = defaultdict(list)
    for entry in entries:
        if entry.file.level >= 1:
            runs[(entry.partition, entry.bucket, entry.file.level)].append(entry)
    for (_, bucket, level), files in runs.items():
        if len(files) < 2:
            continue
        keyed = sorted(files, key=lambda e: key_order(e.file.min_key))
        for prev, cur in pairwise(keyed):
            if key_order(cur.file.min_key) <= key_order(prev.file.max_key):
                raise CommitConflictError(
                    f"LSM conflicts detected in {where} (bucket {bucket}, level {level}): files "
                    f"{prev.file.file_name} and {cur.file.file_name} overlap; give up committing")


def apply_index_changes(live: Sequence[IndexManifestEntry], changes: Sequence[IndexManifestEntry],
                        where: str, whole_bucket: bool = True) -> list[IndexManifestEntry]:
    """The live index files after `changes` (Paimon's IndexManifestFileHandler). Every DELETE
    must name a live file. With `whole_bucket` (bucketed tables), ADDs for a bucket must replace
    every file of it that was live: a writer rewrites all the deletion vectors of its bucket, so a
    file it did not delete was added by another writer since, whose deletes committing would lose.
    Tables without buckets rewrite only some index files of a partition. Either way each data file's
    vector is checked as well (check_deletion_vector_conflicts): a bucket without an index file
    when a writer read it replaces none, so this check alone misses a concurrent rewrite of the
    data files its new vectors mark."""
    state = {e.file_name: e for e in live}
    for entry in changes:
        if entry.kind == FileKind.DELETE and state.pop(entry.file_name, None) is None:
            raise CommitConflictError(
                f"trying to delete index file {entry.file_name} of {where} which is not live (a concurrent "
                "commit changed the deletion vectors of its bucket); restart from the latest snapshot")
    kept = {(e.partition, e.bucket, e.index_type): e.file_name for e in state.values()} if whole_bucket else {}
    for entry in changes:
        if entry.kind == FileKind.DELETE:
            continue
        other = kept.get((entry.partition, entry.bucket, entry.index_type))
        if other is not None:
            raise CommitConflictError(
                f"index file {entry.file_name} of {where} would sit beside {other} of the same bucket "
                f"{entry.bucket} (a concurrent commit added deletion vectors to it); restart from the latest snapshot")
        state[entry.file_name] = entry
    return list(state.values())


def check_deletion_vector_conflicts(live: Sequence[ManifestEntry], live_index: Sequence[IndexManifestEntry],
                                    entries: Sequence[ManifestEntry], index_changes: Sequence[IndexManifestEntry],
                                    where: str) -> None:
    """Tables with deletion vectors (Paimon's ConflictDetection with deletion vectors): a data
    file's vector is part of its identity. A commit that rewrites the vector of a data file
    must have read the vector that is live now; one that gives a file its first vector must find it
    still without one, and the file still live; a compaction that removes a data file must drop the
    vector that is live now (none if it read none). Otherwise a concurrent delete or compaction
    changed the file meanwhile, and committing would lose deleted rows or resurrect them (for a
    primary-key table: two live versions of a key, which an aggregation counts twice)."""
    base = _vector_files(live_index)
    removed = _vector_files(e for e in index_changes if e.kind == FileKind.DELETE)
    added = _vector_files(e for e in index_changes if e.kind == FileKind.ADD)
    restart = "; restart from the latest snapshot"
    for name, index in removed.items():
        if base.get(name) != index:
            raise CommitConflictError(
                f"the deletion vector of data file {name} of {where} changed since this commit read it (a "
                f"concurrent delete or compaction rewrote index file {index}){restart}")
    for name in added:
        if name not in removed and name in base:
            raise CommitConflictError(
                f"data file {name} of {where} got a deletion vector from a concurrent commit (index file "
                f"{base[name]}) after this commit read it{restart}")
    live_files = {e.file.file_name for e in live}
    files = set(live_files)
    gone = set()
    for entry in entries:
        if entry.kind == FileKind.DELETE:
            gone.add(entry.file.file_name)
            vector = base.get(entry.file.file_name)
            if vector is not None and removed.get(entry.file.file_name) != vector:
                raise CommitConflictError(
                    f"data file {entry.file.file_name} of {where} got deleted rows (index file {vector}) "
                    f"after this compaction read it; rewriting it would bring them back{restart}")
        else:
            files.add(entry.file.file_name)
    stale, counts = _stale_vectors(live_index, live_files), _cardinalities(index_changes)
    for name in added:
        carried = name in stale and stale[name] is not None and stale[name] == counts.get(name)
        if (name not in files or name in gone) and not carried:
            raise CommitConflictError(
                f"data file {name} of {where} is no longer live (a concurrent compaction or overwrite removed "
                f"it): the rows this commit deletes in it would be lost{restart}")


def _stale_vectors(live_index: Sequence[IndexManifestEntry], live_files: set[str]) -> dict[str, int | None]:
    """Vectors of data files that are already gone, with how many rows they mark. A compaction that
    keeps its bucket's index file as it is leaves them behind (Paimon's Java compaction does), and a
    later commit rewriting that index file carries them over unchanged: that is no conflict. Marks
    only grow, so an unchanged cardinality means an unchanged vector."""
    return {name: count for name, count in _cardinalities(live_index).items() if name not in live_files}


def _cardinalities(entries: Iterable[IndexManifestEntry]) -> dict[str, int | None]:
    return {r.data_file_name: r.cardinality for e in entries if e.kind == FileKind.ADD
            and e.index_type == INDEX_TYPE_DELETION_VECTORS for r in e.dv_ranges or []}


def _vector_files(entries: Iterable[IndexManifestEntry]) -> dict[str, str]:
    """Data file -> the deletion-vector index file holding its vector."""
    return {r.data_file_name: e.file_name for e in entries if e.index_type == INDEX_TYPE_DELETION_VECTORS
            for r in e.dv_ranges or []}
