"""Conflict detection before publishing a snapshot (ConflictDetection.checkConflicts)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise

from strata.errors import CommitConflictError
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
