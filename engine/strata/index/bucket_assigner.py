"""Dynamic bucket assignment (Paimon's HashBucketAssigner / PartitionIndex), vectorized.

A primary-key table with ``bucket = -1`` places each key through its partition's HASH index:
a key whose hash is indexed stays in that bucket; a new hash goes to the first bucket (lowest id
first) holding fewer than ``dynamic-bucket.target-row-num`` hashes, else to a new bucket with the
lowest free id; past ``dynamic-bucket.max-buckets`` it goes to a random existing bucket, as in
Paimon. The index of a partition is a hash map (hash -> bucket, strata.index.hash_map) that looks
up and adds a whole batch at a time.

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
from strata.index.hash_map import HashBucketMap, distinct_sorted
from strata.manifest.index_manifest import INDEX_TYPE_HASH, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind

MAX_DYNAMIC_BUCKETS = 32767  # bucket ids are Java shorts in Paimon's index

ReadHashes = Callable[[IndexManifestEntry], np.ndarray]


@dataclass
class HashClaim:
    """What one bucket's new hash index file adds, for the committer's cross-writer check."""

    partition: bytes
    bucket: int
    file_name: str  # the new index file
    base: frozenset[str]  # the partition's HASH index files this writer's placement started from
    new_hashes: np.ndarray = field(repr=False)  # hashes this writer placed in the bucket since then


class PartitionIndex:
    """hash -> bucket of one partition, with each bucket's hashes and its live index file."""

    def __init__(self, partition: bytes, entries: Sequence[IndexManifestEntry], read: ReadHashes,
                 target_rows: int, max_buckets: int, where: str):
        self.partition = partition
        self.target_rows = target_rows
        self.max_buckets = max_buckets
        self.where = where
        self.files: dict[int, IndexManifestEntry] = {e.bucket: e for e in entries}
        parts_h = [np.asarray(read(e), dtype=np.int32) for e in entries]
        # each bucket's hashes, the content of its next index file, in chunks joined when it is written
        self.hashes_of: dict[int, list[np.ndarray]] = {}
        for h, e in zip(parts_h, entries, strict=True):
            self.hashes_of.setdefault(e.bucket, []).append(h)
        self.counts: dict[int, int] = {b: sum(len(h) for h in hs) for b, hs in self.hashes_of.items()}
        self.map = HashBucketMap()
        if parts_h:
            all_h = np.concatenate(parts_h)
            all_b = np.concatenate([np.full(len(h), e.bucket, dtype=np.int16)
                                    for h, e in zip(parts_h, entries, strict=True)])
            if len(parts_h) > 1:  # a hash in two files goes where the first file says (one file is a set)
                all_h, first = np.unique(all_h, return_index=True)
                all_b = all_b[first]
            self.map.put(all_h, all_b)
        self.pending: dict[int, list[np.ndarray]] = {}  # bucket -> hashes placed since the last commit
        self.base = frozenset(e.file_name for e in entries)
        self.upper_bound_reached = False
        self._rng = np.random.default_rng()

    def assign(self, hashes: np.ndarray) -> np.ndarray:
        """The bucket (int64) of each row's key hash; new hashes are placed, in order of arrival,
        and remembered."""
        found, new, placed = self.map.assign(hashes, self._place)
        if len(new):
            self._remember(new, placed)
        return found

    def _place(self, count: int) -> np.ndarray:
        """Buckets for `count` new hashes in arrival order: fill, then open, then spread."""
        if count == 0:  # the map asks at every batch: no walk over the buckets for a batch of known keys
            return np.empty(0, dtype=np.int64)
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
        """Keep new hashes (distinct, just added to the map) for the buckets' next index files."""
        if (buckets == buckets[0]).all():  # the common case: a partition's new keys fill one bucket
            chunks = [(int(buckets[0]), hashes)]
        else:
            order = np.argsort(buckets, kind="stable")
            cuts = np.flatnonzero(np.diff(buckets[order])) + 1
            chunks = [(int(buckets[c[0]]), hashes[c]) for c in np.split(order, cuts)]
        for bucket, chunk in chunks:
            self.pending.setdefault(bucket, []).append(chunk)
            self.hashes_of.setdefault(bucket, []).append(chunk)

    def bucket_hashes(self, bucket: int) -> np.ndarray:
        """Every hash of the bucket: its index file's content (a set, in no particular order)."""
        chunks = self.hashes_of[bucket]
        if len(chunks) > 1:
            chunks[:] = [np.concatenate(chunks)]
        return chunks[0]

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
        pairs = distinct_sorted((placed.astype(np.int64) << 16) | buckets)  # bucket ids < 2^15
        if len(distinct_sorted(pairs >> 16)) < len(pairs):
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
        merged = write(partition, bucket, distinct_sorted(np.concatenate([read(e) for _, e in group])))
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
