"""Dynamic bucket assignment (Paimon's HashBucketAssigner / PartitionIndex), vectorized.

A primary-key table with ``bucket = -1`` places each key through its partition's HASH index:
a key whose hash is indexed stays in that bucket; a new hash goes to the first bucket (lowest id
first) holding fewer than ``dynamic-bucket.target-row-num`` hashes, else to a new bucket with the
lowest free id; past ``dynamic-bucket.max-buckets`` it goes to a random existing bucket, as in
Paimon. The index of a partition is two sorted arrays (hash -> bucket): a large main part and a
small delta merged into it now and then, so a batch is placed with np.unique and searchsorted.

At each commit a bucket that got new hashes gets a new index file with all of its hashes; the
commit message DELETEs the bucket's previous file and carries a `HashClaim` (the new hashes and
the partition's index files this writer started from), which the committer checks against index
files other writers committed meanwhile (check_hash_claims): one key never lands in two buckets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from strata.errors import CommitConflictError, OptionError
from strata.manifest.index_manifest import INDEX_TYPE_HASH, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind

MAX_DYNAMIC_BUCKETS = 32767  # bucket ids are Java shorts in Paimon's index
_DELTA_MIN = 1 << 16  # the delta is merged into the main arrays past this size (or 1/8 of main)

ReadHashes = Callable[[IndexManifestEntry], np.ndarray]


@dataclass
class HashClaim:
    """What one bucket's new hash index file adds, for the committer's cross-writer check."""

    partition: bytes
    bucket: int
    file_name: str  # the new index file
    base: frozenset[str]  # the partition's HASH index files this writer's placement started from
    new_hashes: np.ndarray = field(repr=False)  # hashes this writer placed in the bucket since then


def _merge_sorted(hashes: np.ndarray, buckets: np.ndarray, more_h: np.ndarray,
                  more_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted hash arrays without common hashes (and their buckets) as one. Each hash and its
    bucket are packed in one int64 (hash above, bucket in the low 16 bits: the order is the
    hashes'), so one stable sort, which merges two sorted runs in linear time, carries both."""
    if not len(more_h):
        return hashes, buckets
    if not len(hashes):
        return more_h, more_b
    packed = np.sort(np.concatenate([_pack(hashes, buckets), _pack(more_h, more_b)]), kind="stable")
    return (packed >> 16).astype(np.int32), (packed & 0xFFFF).astype(np.uint16).view(np.int16)


def _pack(hashes: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    return (hashes.astype(np.int64) << 16) | (buckets.astype(np.int64) & 0xFFFF)


def _distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (a sort: numpy's hash-based unique is slower on these sizes)."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


def _lookup(sorted_h: np.ndarray, sorted_b: np.ndarray, keys: np.ndarray, out: np.ndarray) -> None:
    """Set `out` (buckets, -1 = unknown) for the `keys` found in the sorted arrays."""
    if not len(sorted_h) or not len(keys):
        return
    pos = np.searchsorted(sorted_h, keys)
    pos[pos == len(sorted_h)] = 0
    found = sorted_h[pos] == keys
    out[found] = sorted_b[pos[found]]


class PartitionIndex:
    """hash -> bucket of one partition, with each bucket's hash count and its live index file."""

    def __init__(self, partition: bytes, entries: Sequence[IndexManifestEntry], read: ReadHashes,
                 target_rows: int, max_buckets: int, where: str):
        self.partition = partition
        self.target_rows = target_rows
        self.max_buckets = max_buckets
        self.where = where
        self.files: dict[int, IndexManifestEntry] = {e.bucket: e for e in entries}
        parts_h = [np.asarray(read(e), dtype=np.int32) for e in entries]
        parts_b = [np.full(len(h), e.bucket, dtype=np.int16) for h, e in zip(parts_h, entries, strict=True)]
        self.counts: dict[int, int] = {e.bucket: len(h) for h, e in zip(parts_h, entries, strict=True)}
        empty_h, empty_b = np.empty(0, np.int32), np.empty(0, np.int16)
        all_h, all_b = np.concatenate(parts_h or [empty_h]), np.concatenate(parts_b or [empty_b])
        order = np.argsort(all_h, kind="stable")
        self.main_h, self.main_b = all_h[order], all_b[order]
        self.delta_h, self.delta_b = empty_h, empty_b
        self.pending: dict[int, list[np.ndarray]] = {}  # bucket -> hashes placed since the last commit
        self.base = frozenset(e.file_name for e in entries)
        self.upper_bound_reached = False
        self._rng = np.random.default_rng()

    def assign(self, hashes: np.ndarray) -> np.ndarray:
        """The bucket (int64) of each row's key hash; new hashes are placed and remembered.
        The batch is looked up in hash order (binary searches of ascending keys stay in cache,
        and an unstable sort is several times cheaper than np.unique's stable one); only the
        hashes found nowhere are made distinct, and placed in order of arrival."""
        order = np.argsort(hashes)  # which of equal hashes comes first does not matter
        keys = hashes[order]
        found = np.full(len(keys), -1, dtype=np.int64)
        _lookup(self.main_h, self.main_b, keys, found)
        unknown = found < 0
        if unknown.any() and len(self.delta_h):
            sub = found[unknown]
            _lookup(self.delta_h, self.delta_b, keys[unknown], sub)
            found[unknown] = sub
            unknown = found < 0
        if unknown.any():
            at = np.flatnonzero(unknown)
            new_keys = keys[at]
            starts = np.concatenate([[True], new_keys[1:] != new_keys[:-1]])
            first = np.minimum.reduceat(order[at], np.flatnonzero(starts))  # each new hash's first row
            placed = np.empty(len(first), dtype=np.int64)
            placed[np.argsort(first)] = self._place(len(first))
            found[at] = placed[np.cumsum(starts) - 1]
            self._remember(new_keys[starts], placed)
        out = np.empty_like(found)
        out[order] = found
        return out

    def _place(self, count: int) -> np.ndarray:
        """Buckets for `count` new hashes in arrival order: fill, then open, then spread."""
        chosen: list[int] = []
        sizes: list[int] = []
        remaining = count
        for bucket in sorted(self.counts):
            free = self.target_rows - self.counts[bucket]
            if remaining and free > 0:
                take = min(free, remaining)
                chosen.append(bucket)
                sizes.append(take)
                remaining -= take
        limit = MAX_DYNAMIC_BUCKETS if self.max_buckets == -1 else self.max_buckets
        candidate = 0
        while remaining and not self.upper_bound_reached:
            while candidate < limit and candidate in self.counts:
                candidate += 1
            if candidate >= limit:
                if self.max_buckets == -1:
                    raise OptionError(f"{self.where}: more than {limit} dynamic buckets in one partition; "
                                      "raise dynamic-bucket.target-row-num")
                self.upper_bound_reached = True
                break
            take = min(self.target_rows, remaining)
            self.counts[candidate] = 0
            chosen.append(candidate)
            sizes.append(take)
            remaining -= take
        for bucket, size in zip(chosen, sizes, strict=True):
            self.counts[bucket] += size
        placed = np.repeat(np.asarray(chosen, dtype=np.int64), sizes)
        if remaining:  # past max-buckets: a random existing bucket, as Paimon does
            existing = np.asarray(sorted(self.counts), dtype=np.int64)
            spread = existing[self._rng.integers(0, len(existing), remaining)]
            for bucket, size in zip(*np.unique(spread, return_counts=True), strict=True):
                self.counts[int(bucket)] += int(size)
            placed = np.concatenate([placed, spread])
        return placed

    def _remember(self, hashes: np.ndarray, buckets: np.ndarray) -> None:
        """Add new hashes (sorted, distinct, in none of the arrays) with their buckets."""
        small = buckets.astype(np.int16)
        self.delta_h, self.delta_b = _merge_sorted(self.delta_h, self.delta_b, hashes.astype(np.int32), small)
        if len(self.delta_h) > max(_DELTA_MIN, len(self.main_h) // 8):
            self.main_h, self.main_b = _merge_sorted(self.main_h, self.main_b, self.delta_h, self.delta_b)
            self.delta_h, self.delta_b = self.delta_h[:0], self.delta_b[:0]
        if (buckets == buckets[0]).all():  # the common case: a partition's new keys fill one bucket
            self.pending.setdefault(int(buckets[0]), []).append(hashes)
            return
        order = np.argsort(buckets, kind="stable")
        cuts = np.flatnonzero(np.diff(buckets[order])) + 1
        for chunk in np.split(order, cuts):
            self.pending.setdefault(int(buckets[chunk[0]]), []).append(hashes[chunk])

    def bucket_hashes(self, bucket: int) -> np.ndarray:
        """Every hash of the bucket (its index file's content): its part of the main and of the
        delta arrays, each distinct and sorted, without common hashes. Not merged into one order:
        an index file is a set (Paimon reads it into a hash set; readers here sort or test
        membership), and the merge cost 2 ms per bucket and commit."""
        if len(self.counts) == 1:  # the partition's only bucket: every hash is its own
            return np.concatenate([self.main_h, self.delta_h])
        parts = [self._of_bucket(self.main_h, self.main_b, bucket), self._of_bucket(self.delta_h, self.delta_b, bucket)]
        return np.concatenate(parts)

    @staticmethod
    def _of_bucket(hashes: np.ndarray, buckets: np.ndarray, bucket: int) -> np.ndarray:
        mask = buckets == bucket
        return hashes if mask.all() else hashes[mask]

    def prepare_commit(self, write: Callable[[int, np.ndarray], IndexManifestEntry]
                       ) -> list[tuple[int, list[IndexManifestEntry], HashClaim]]:
        """New index files for the buckets that got hashes: (bucket, index changes, claim) each."""
        out = []
        base = frozenset(e.file_name for e in self.files.values())
        for bucket in sorted(self.pending):
            added = write(bucket, self.bucket_hashes(bucket))
            changes = [added]
            previous = self.files.get(bucket)
            if previous is not None:
                changes.insert(0, IndexManifestEntry(FileKind.DELETE, previous.partition, previous.bucket,
                                                     INDEX_TYPE_HASH, previous.file_name, previous.file_size,
                                                     previous.row_count, external_path=previous.external_path))
            new = np.concatenate(self.pending[bucket])
            out.append((bucket, changes, HashClaim(self.partition, bucket, added.file_name, base, new)))
            self.files[bucket] = added
        self.pending.clear()
        return out


class DynamicBucketAssigner:
    """The partition indexes of one writer, loaded from the latest snapshot's HASH index files."""

    def __init__(self, index_entries: Callable[[], Sequence[IndexManifestEntry]], read: ReadHashes,
                 target_rows: int, max_buckets: int, where: str):
        if max_buckets != -1 and not 0 < max_buckets <= MAX_DYNAMIC_BUCKETS:
            raise OptionError(f"{where}: dynamic-bucket.max-buckets must be -1 or between 1 and "
                              f"{MAX_DYNAMIC_BUCKETS}, got {max_buckets}")
        if target_rows < 1:
            raise OptionError(f"{where}: dynamic-bucket.target-row-num must be positive, got {target_rows}")
        self._index_entries = index_entries
        self.read = read
        self.target_rows = target_rows
        self.max_buckets = max_buckets
        self.where = where
        self.partitions: dict[bytes, PartitionIndex] = {}
        self._hash_files: dict[bytes, list[IndexManifestEntry]] | None = None

    def partition(self, partition: bytes) -> PartitionIndex:
        index = self.partitions.get(partition)
        if index is None:
            if self._hash_files is None:
                self._hash_files = {}
                for e in self._index_entries():
                    if e.index_type == INDEX_TYPE_HASH:
                        self._hash_files.setdefault(e.partition, []).append(e)
            index = PartitionIndex(partition, self._hash_files.get(partition, []), self.read,
                                   self.target_rows, self.max_buckets, self.where)
            self.partitions[partition] = index
        return index

    def assign(self, partition: bytes, hashes: np.ndarray) -> np.ndarray:
        return self.partition(partition).assign(hashes)

    def checkpoint(self) -> dict[bytes, tuple[dict[int, IndexManifestEntry], dict[int, list[np.ndarray]]]]:
        """Each partition's live index files and the hashes it placed since its last commit."""
        return {p: (dict(index.files), {b: list(h) for b, h in index.pending.items()})
                for p, index in self.partitions.items()}

    def restore(self, saved: dict[bytes, tuple[dict[int, IndexManifestEntry], dict[int, list[np.ndarray]]]]) -> None:
        """Back to a checkpoint of a prepare_commit that failed: its index files were never
        committed, and the next one must write the buckets' files again."""
        for p, (files, pending) in saved.items():
            self.partitions[p].files, self.partitions[p].pending = files, pending


def check_hash_claims(live: Sequence[IndexManifestEntry], changes: Sequence[IndexManifestEntry],
                      claims: Sequence[HashClaim], read: ReadHashes, where: str) -> None:
    """Refuse a commit that would put one key hash in two buckets of a partition: a bucket's
    index file it replaces must still be live, and the hashes it places anew must not be in
    another writer's index files committed since its placement started, nor placed in another
    bucket by another writer of the same commit."""
    restart = ("; the writer must restart from the latest snapshot (dynamic-bucket tables take "
               "one writer per partition at a time)")
    live_names = {e.file_name for e in live}
    for entry in changes:
        if entry.index_type == INDEX_TYPE_HASH and entry.kind == FileKind.DELETE and entry.file_name not in live_names:
            raise CommitConflictError(
                f"hash index file {entry.file_name} of bucket {entry.bucket} of {where} was replaced by a "
                f"concurrent commit that placed keys in it{restart}")
    ours = {c.file_name for c in claims}
    by_partition: dict[bytes, list[HashClaim]] = {}
    for claim in claims:
        by_partition.setdefault(claim.partition, []).append(claim)
    for partition, group in by_partition.items():
        placed = np.concatenate([c.new_hashes for c in group])
        buckets = np.concatenate([np.full(len(c.new_hashes), c.bucket, dtype=np.int64) for c in group])
        pairs = _distinct((placed.astype(np.int64) << 16) | buckets)  # bucket ids < 2^15
        if len(_distinct(pairs >> 16)) < len(pairs):
            raise CommitConflictError(
                f"two writers of one commit to {where} placed the same new key in different buckets of one "
                "partition; distribute rows by partition (one writer per partition)")
        others = [e for e in live if e.index_type == INDEX_TYPE_HASH and e.partition == partition
                  and e.file_name not in ours]
        for claim in group:
            for entry in others:
                if entry.file_name not in claim.base and np.isin(claim.new_hashes, read(entry)).any():
                    raise CommitConflictError(
                        f"a concurrent commit placed keys of {where} in bucket {entry.bucket} (hash index "
                        f"file {entry.file_name}) that this commit places in bucket {claim.bucket}{restart}")


@dataclass
class MergedIndexFiles:
    """What merge_bucket_index_files made: the messages to commit, the merged files it wrote
    (to delete if the commit is definitely not published) and the writers' files they replace
    (to delete once it is: until then a replay of the original messages still names them)."""

    messages: list[Any]
    written: list[IndexManifestEntry] = field(default_factory=list)
    replaced: list[IndexManifestEntry] = field(default_factory=list)


def merge_bucket_index_files(messages: Sequence[Any], read: ReadHashes,
                             write: Callable[[bytes, int, np.ndarray], IndexManifestEntry]) -> MergedIndexFiles:
    """Writers of one commit (Spark tasks given rows of one partition) that each rewrote one
    bucket's hash index from the same base: one file with the union of theirs replaces them, and
    the base file is deleted once. Whether they placed one key in two buckets is checked after
    (check_hash_claims). The given messages are left as they are (copies are returned) and no
    file is deleted here: what may be deleted depends on the commit's outcome."""
    added: dict[tuple[bytes, int], list[tuple[int, IndexManifestEntry]]] = {}
    for i, message in enumerate(messages):
        for entry in message.index_changes:
            if entry.index_type == INDEX_TYPE_HASH and entry.kind == FileKind.ADD:
                added.setdefault((entry.partition, entry.bucket), []).append((i, entry))
    out = MergedIndexFiles(list(messages))
    for (partition, bucket), group in added.items():
        if len(group) < 2:
            continue
        merged = write(partition, bucket, _distinct(np.concatenate([read(e) for _, e in group])))
        out.written.append(merged)
        out.replaced.extend(e for _, e in group)
        replaced = {e.file_name for _, e in group}
        deleted: set[str] = set()
        for i, _ in group:
            message = out.messages[i]
            kept = []
            for change in message.index_changes:
                if change.index_type != INDEX_TYPE_HASH or change.bucket != bucket or change.partition != partition:
                    kept.append(change)
                elif change.kind == FileKind.DELETE and change.file_name not in deleted:
                    deleted.add(change.file_name)
                    kept.append(change)
            claims = [dataclasses.replace(c, file_name=merged.file_name) if c.file_name in replaced else c
                      for c in message.hash_claims]
            out.messages[i] = dataclasses.replace(message, index_changes=kept, hash_claims=claims)
        first = group[0][0]
        out.messages[first] = dataclasses.replace(
            out.messages[first], index_changes=[*out.messages[first].index_changes, merged])
    return out
